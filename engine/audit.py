"""The audit log: who paused, resumed, triggered, aborted, backfilled, PUT or DELETEd
which job, when, and with what reason.

An entry is written in the transaction of the change it records (`Audit`, handed to
`JobChanges.apply`), so a change that committed always has its entry, and one that was
refused (a paused job refusing a trigger, a config-managed job refusing a PUT) or that
failed committed nothing and has none; nor has one that changed nothing (the same
PUT again, resuming a job that is not paused). An action whose changes take several
transactions gives its entry to the first one that changes the job (a DELETE to its
first step, which already hides the job). `write_audit` (and `operations.record_audit`
over it) writes an entry in a transaction of its own, for an action that has no single
change to ride on; called right after the action's last commit, a crash between the
two is the one way such an action could lack its entry, so prefer
`apply(..., audit=...)` where it fits.

Each committed entry is also one JSON log line at INFO on the `sundial.audit` logger
(`audit: user:alice@example.com paused p/j: INC-1234`), for log-based alerting.
Entries are kept as long as invocation history (SUNDIAL_HISTORY_DAYS), and removed by
the same clean-up (engine/maintenance.py).
"""

from __future__ import annotations

import hashlib
import logging
import secrets
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Callable
from urllib.parse import urlsplit, urlunsplit

from engine.logs import log_event
from engine.ports import AuditEntry, Transaction
from statemachine.definition import JobDefinition
from statemachine.vocabulary import AuditAction

log = logging.getLogger("sundial.audit")

# The actor of the one-machine mode without API tokens: every caller of the loopback
# address is an owner, and nothing says who they are.
LOCAL_ACTOR = "local"
# What a use case records when its caller named nobody (a script or test calling it directly).
UNKNOWN_ACTOR = "unknown"

_MILLIS_SPAN = 2**44  # as invocation ids (statemachine/ids.py): 11 hex digits, newest first


@dataclass(frozen=True)
class Audit:
    """Who asked for a change and what they asked: becomes an `AuditEntry` when it commits.

    `detail` holds JSON values only: `reason` (pause, abort), `created`, `before` and
    `after` (PUT: `described` of the definition it replaced and of the new one),
    `invocation` (trigger), `start`, `end`, `count` (backfill).
    """

    actor: str
    action: AuditAction
    detail: dict[str, Any] = field(default_factory=dict)


def new_entry(audit: Audit, project: str, job_id: str, now: datetime) -> AuditEntry:
    """The entry, with an id that sorts newest first and is unique in its project (a
    millisecond and 32 random bits)."""
    inverted = _MILLIS_SPAN - int(now.timestamp() * 1000)
    return AuditEntry(project, job_id, f"{inverted:011x}{secrets.token_hex(4)}", now, audit.actor,
                      audit.action, dict(audit.detail))


def described(definition: JobDefinition) -> dict[str, Any]:
    """What a PUT entry keeps of a definition, so that the log shows what a change changed:
    its digest (the job's revision: the first 16 hex digits of the sha256 of its canonical
    JSON) and where it sends, per target (`target`, `on_failure`, `on_recovery`): the kind
    and its URL or topic. A URL loses its query and user info, which may hold credentials
    (the audit log's readers are the project's readers)."""
    digest = hashlib.sha256(definition.canonical_json.encode("utf-8")).hexdigest()[:16]
    targets = {name: _destination(spec) for name, spec in
               (("target", definition.target), ("on_failure", definition.on_failure),
                ("on_recovery", definition.on_recovery)) if spec is not None}
    return {"revision": digest, "targets": targets}


def _destination(spec: dict[str, Any]) -> str:
    kind, fields = next(iter(spec.items()))
    fields = fields if isinstance(fields, dict) else {}
    if "url" not in fields:
        return f"{kind} {fields.get('topic', '')}".strip()
    url = str(fields["url"])
    try:
        parts = urlsplit(url)
        return f"{kind} {urlunsplit((parts.scheme, parts.netloc.rpartition('@')[2], parts.path, '', ''))}"
    except ValueError:  # not a URL urllib can split (checked at validation; a template's own spelling)
        return f"{kind} {url.partition('?')[0]}"


def summary(entry: AuditEntry) -> str:
    """The detail in a few words, for the log line and the job page."""
    detail = entry.detail
    if "reason" in detail:
        return str(detail["reason"])
    if "created" in detail:
        return ("created" if detail["created"] else "replaced") + _changed_targets(detail)
    if "invocation" in detail:
        return f"invocation {detail['invocation']}"
    if {"start", "end"} <= detail.keys():
        count = f": {detail['count']} invocations" if "count" in detail else ""
        return f"{detail['start']} to {detail['end']}{count}"
    return ", ".join(f"{key} {value}" for key, value in detail.items())


def _changed_targets(detail: dict[str, Any]) -> str:
    before = (detail.get("before") or {}).get("targets") or {}
    after = (detail.get("after") or {}).get("targets") or {}
    changes = [f"{name} {before.get(name) or 'none'} -> {after.get(name) or 'none'}"
               for name in sorted(set(before) | set(after)) if before.get(name) != after.get(name)]
    return f": {'; '.join(changes)}" if changes and before else ""


_PAST_TENSE = {action.value: action.past_tense for action in AuditAction}


def log_entry(entry: AuditEntry) -> None:
    """One line per committed entry (after the commit: a rolled-back run logs nothing)."""
    said = summary(entry)
    verb = _PAST_TENSE.get(entry.action, entry.action)
    log_event(log, f"audit: {entry.actor} {verb} {entry.project}/{entry.job_id}" + (f": {said}" if said else ""),
              actor=entry.actor, action=entry.action, job=f"{entry.project}/{entry.job_id}", detail=entry.detail)


def write_audit(write: Callable[[Callable[[Transaction], None]], Any], now: datetime, project: str, job_id: str,
                 audit: Audit) -> AuditEntry:
    """Write `audit` in a transaction of its own (`write` is `JobChanges.write`) and log it.

    For an action that has no single `JobChanges.apply` to carry its entry; call it
    right after the action's last commit.

    :raises StoreError: nothing was written.
    """
    entry = new_entry(audit, project, job_id, now)
    write(lambda tx: tx.put_audit(entry))
    log_entry(entry)
    return entry
