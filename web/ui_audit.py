"""The job page's Audit section (templates/ui/_job_audit.html): the job's newest operator
actions (engine/audit.py), read when the page renders.

The section reads its own entries through these template globals rather than through
the job page's view, so the page's view and the section stay apart; it costs one
more bounded read (AUDIT_ROWS entries of one job).
"""

from __future__ import annotations

from typing import Any

from engine.audit import summary
from web.context import queries

AUDIT_ROWS = 20  # entries shown on the job page; the API pages through the rest

_KINDS = ("user:", "serviceAccount:")


def actor_name(actor: str) -> str:
    """`user:alice@example.com` as people say it: `alice@example.com`."""
    for kind in _KINDS:
        if actor.startswith(kind):
            return actor[len(kind):]
    return actor


def job_audit(project: str, job_id: str) -> list[dict[str, Any]]:
    """The job's newest entries, newest first, as the section shows them. The page has
    checked that the caller may read the project."""
    entries, _ = queries().audit(project, job_id, AUDIT_ROWS, None)
    return [{"time": entry.time, "actor": actor_name(entry.actor), "principal": entry.actor,
             "action": entry.action, "detail": summary(entry)} for entry in entries]
