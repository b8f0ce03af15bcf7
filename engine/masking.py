"""What a reader is shown of a job's definition, and how a PUT of what was shown keeps
the credentials the masks stand for (docs/REFERENCE.md section 6.4).

Every target a definition holds (the job's `target`, its `on_failure` and `on_recovery`
hooks, of any kind) is shown by the rules of statemachine/safety.py: each literal header
value but a harmless few's as `<redacted>`, a secret reference `{secret: NAME}` as
itself, and the URL's password and credential-like query values as `<redacted>`. Only
what is shown is masked; the stored definition keeps its values. Owners are shown the
same as every other reader: a page or an answer is easily passed on, and the values
are where their author wrote them (the config file, or the PUT's sender).

A client that GETs a job and PUTs it back (to change one field) sends the masks back.
`unmasked_entry` puts the stored values back for them, on one condition that keeps the
values from being sent anywhere new: the target's scheme, host and port are unchanged.
A mask that stands for nothing (a new job, a header the job did not have, another host)
is refused: stored, `<redacted>` would be sent as the value.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from statemachine.definition import JobDefinition
from statemachine.safety import MASK, masked_url, same_origin, shows_header_value
from statemachine.target_kinds import FieldShape, kind_spec

TARGET_FIELDS = ("target", "on_failure", "on_recovery")


def masked_definition(definition: JobDefinition) -> JobDefinition:
    """A job definition as it may be shown to any reader (the module's rules)."""
    failure, recovery = definition.on_failure, definition.on_recovery
    return replace(definition, target=masked_target(definition.target),
                   on_failure=None if failure is None else masked_target(failure),
                   on_recovery=None if recovery is None else masked_target(recovery))


def masked_target(target: dict[str, Any]) -> dict[str, Any]:
    """A target ({kind: spec}) as a reader is shown it."""
    return {kind: _masked_spec(kind, spec) if isinstance(spec, dict) else spec for kind, spec in target.items()}


def _masked_spec(kind: str, spec: dict[str, Any]) -> dict[str, Any]:
    """Its secret-bearing fields (statemachine/target_kinds.py) masked: a URL's
    credentials, and every header value but a harmless one's or a secret reference."""
    shown = dict(spec)
    for field in kind_spec(kind).fields:
        value = spec.get(field.name)
        if field.shape is FieldShape.URL and isinstance(value, str):
            shown[field.name] = masked_url(value)
        elif field.secret and field.shape is FieldShape.TEMPLATE_MAP and isinstance(value, dict):
            shown[field.name] = {name: item if isinstance(item, dict) or shows_header_value(str(name)) else MASK
                                 for name, item in value.items()}
    return shown


class MaskedValues(ValueError):
    """A PUT sent masks that stand for no stored value it may keep: one message each."""

    def __init__(self, messages: list[str]) -> None:
        super().__init__("; ".join(messages))
        self.messages = messages


def unmasked_entry(entry: dict[str, Any], stored: JobDefinition | None) -> dict[str, Any]:
    """`entry` (a job PUT's body) with each mask a GET showed of `stored` (the job as
    stored now; None for a new job) replaced by the stored value it stands for.

    :raises MaskedValues: a mask that stands for nothing, or for a value on another host.
    """
    unmasked, errors = dict(entry), list[str]()
    for field in TARGET_FIELDS:
        target = entry.get(field)
        if isinstance(target, dict):
            before = getattr(stored, field) if stored is not None else None
            unmasked[field] = {kind: _unmasked_spec(f"{field}.{kind}", spec, _spec_of(before, kind), errors)
                               if isinstance(spec, dict) else spec for kind, spec in target.items()}
    if errors:
        raise MaskedValues(errors)
    return unmasked


def _spec_of(target: object, kind: str) -> dict[str, Any]:
    spec = target.get(kind) if isinstance(target, dict) else None
    return spec if isinstance(spec, dict) else {}


def _unmasked_spec(where: str, spec: dict[str, Any], before: dict[str, Any], errors: list[str]) -> dict[str, Any]:
    unmasked = dict(spec)
    url, stored_url = spec.get("url"), before.get("url")
    if isinstance(url, str) and isinstance(stored_url, str) and url == masked_url(stored_url):
        unmasked["url"] = url = stored_url  # the URL as a GET showed it: the stored one
    if isinstance(url, str) and MASK in url:
        errors.append(f"{where}.url: {MASK} stands for a stored value only in the whole URL as a GET "
                      "shows it; send the value itself")
    headers = spec.get("headers")
    if isinstance(headers, dict):
        # Kinds without a URL (none has headers today) compare two empty origins.
        same_host = same_origin(str(url or ""), str(stored_url or ""))
        stored_headers = {str(name).lower(): value for name, value in (before.get("headers") or {}).items()}
        unmasked["headers"] = {name: _unmasked_header(f"{where}.headers.{name}", str(name), value, stored_headers,
                                                      same_host, errors)
                               for name, value in headers.items()}
    return unmasked


def _unmasked_header(where: str, name: str, value: object, stored: dict[str, object], same_host: bool,
                     errors: list[str]) -> object:
    if value != MASK:
        return value
    kept = stored.get(name.lower())
    if kept is None or isinstance(kept, dict) or shows_header_value(name):
        errors.append(f"{where}: {MASK} stands for a stored value only in a header the job has, whose "
                      "value a GET masks; send the value itself")
    elif not same_host:
        errors.append(f"{where}: {MASK} keeps the stored value only while the target's scheme, host and "
                      "port stay the same; send the value itself")
    else:
        return kept
    return value
