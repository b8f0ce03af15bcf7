"""What an attempt sent, as its invocation's log keeps it (docs/REFERENCE.md section 7).

The invocation page shows the request each attempt sent, not the job's definition as it
reads today (which may have changed since). The record is made from the rendered target
the sender was handed, and it is made safe and small before it is stored:

- every header value but a harmless few's (Content-Type, Accept, User-Agent, ...:
  statemachine/safety.py HARMLESS_HEADERS), and any whose value came from a secret, is
  stored as `<redacted>`, and so are the URL's password and credential-like query
  values: a secret never reaches the store;
- the credentials the attempt sent (`credentials`, statemachine/safety.py
  sent_credentials) are masked wherever they occur in the record's other text too;
- the body (`body`, or Pub/Sub's `data`) is cut to SENT_BODY_BYTES bytes of UTF-8, with
  its whole size kept beside it; other text fields and header values are cut too;
- a log keeps the record on its newest REQUESTS_KEPT attempt entries only
  (engine/recording.py), so that an invocation retried two hundred times stays far
  below Datastore's 1 MiB entity limit.

The sender's own headers (X-Sundial-Job, -Invocation, -Attempt, the completion token)
are not in the record: the page shows them from the invocation, and the token is a
credential.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

from engine.secrets import REDACTED, redact_headers
from statemachine.safety import masked_url, redact_echoes
from statemachine.target_kinds import FieldShape, TargetField, kind_spec

SENT_BODY_BYTES = 4096  # of the body (or Pub/Sub data) kept per attempt
SENT_TEXT_CHARS = 2048  # of the URL, topic, queue and other text fields
SENT_VALUE_CHARS = 256  # of each header or attribute value
SENT_ENTRIES = 32  # headers or attributes kept per attempt
REQUESTS_KEPT = 10  # log entries that keep their request record; older ones drop it


def sent_record(target: dict[str, Any], secret_headers: frozenset[str] = frozenset(),
                credentials: Iterable[str] = ()) -> dict[str, Any]:
    """The stored form of a rendered target ({kind: spec}) as one attempt sent it;
    `credentials`: what the attempt sent that is masked wherever it occurs."""
    kind, spec = next(iter(target.items()))
    record: dict[str, Any] = {"kind": kind}
    if not isinstance(spec, dict):
        return record
    mask = frozenset(credentials)
    fields = kind_spec(kind)
    for name, value in spec.items():
        field = fields.field(name) or _PLAIN
        if field.payload and isinstance(value, str):
            record[name], size = _cut_bytes(redact_echoes(value, mask), SENT_BODY_BYTES)
            if size > SENT_BODY_BYTES:
                record[f"{name}_bytes"] = size  # how large it was; the record holds the start
        elif field.shape is FieldShape.TEMPLATE_MAP and isinstance(value, dict):
            record[name] = masked_headers(value, secret_headers) if field.secret else _cut_map(value, mask)
        elif isinstance(value, bool | int | float):
            record[name] = value
        elif isinstance(value, str):
            shown = masked_url(value) if field.shape is FieldShape.URL else value
            record[name] = redact_echoes(shown, mask)[:SENT_TEXT_CHARS]
    if any(spec.get(field.name) for field in fields.fields if field.shape is FieldShape.AUTH):
        record.setdefault("headers", {})["Authorization"] = REDACTED  # a token minted for this attempt
    return record


_PLAIN = TargetField("", FieldShape.TEXT)  # a field the kind's spec does not have: kept as plain text


def _cut_map(values: Mapping[str, object], mask: frozenset[str]) -> dict[str, str]:
    return {str(key)[:SENT_VALUE_CHARS]: redact_echoes(str(item), mask)[:SENT_VALUE_CHARS]
            for key, item in list(values.items())[:SENT_ENTRIES]}


def masked_headers(headers: Mapping[str, object], secret_headers: frozenset[str] = frozenset()) -> dict[str, str]:
    """Header values fit to store or show: all but harmless ones, and every secret-backed
    one, as `<redacted>`."""
    shown = redact_headers(headers, secret_headers)
    return {str(name)[:SENT_VALUE_CHARS]: str(value)[:SENT_VALUE_CHARS]
            for name, value in list(shown.items())[:SENT_ENTRIES]}


def shown_log(log: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """An invocation's log as a reader is shown it: each attempt's request masked by
    today's rules, for the records stored before them (a copy; the row is not changed)."""
    return [{**entry, "request": shown_request(entry["request"])} if isinstance(entry.get("request"), dict)
            else entry for entry in log]


def shown_request(record: dict[str, Any]) -> dict[str, Any]:
    """A stored request record with its headers and URL masked as a new one would be."""
    shown = dict(record)
    if isinstance(record.get("headers"), dict):
        shown["headers"] = masked_headers(record["headers"])
    if isinstance(record.get("url"), str):
        shown["url"] = masked_url(record["url"])
    return shown


def prune_requests(log: list[dict[str, Any]]) -> None:
    """Drop the request record of every entry but the newest REQUESTS_KEPT that have one."""
    kept = 0
    for entry in reversed(log):
        if "request" in entry:
            kept += 1
            if kept > REQUESTS_KEPT:
                del entry["request"]


def _cut_bytes(text: str, limit: int) -> tuple[str, int]:
    encoded = text.encode("utf-8")
    if len(encoded) <= limit:
        return text, len(encoded)
    return encoded[:limit].decode("utf-8", errors="ignore"), len(encoded)  # never half a character
