"""What a job's inbox (engine/inbox.py) needs of a transaction: rows of their own,
beside the job's record, keyed by the job and an idempotency key.

A trigger is appended as one of these rows, which locks nothing of the job (on
Firestore in Datastore mode each row is its own entity; on SQLite and in memory a
row of another table), and the job's next fold moves every pending row into the
record and deletes it in the same commit.
"""

from __future__ import annotations

from typing import Any, Protocol


class InboxRows(Protocol):
    def get_inbox(self, project: str, job_id: str, key: str) -> dict[str, Any] | None:
        """The job's pending row `key`, as stored; None when there is none (any more)."""

    def put_inbox(self, project: str, job_id: str, key: str, value: dict[str, Any]) -> None:
        """Create or replace the job's pending row `key`."""

    def list_inbox(self, project: str, job_id: str, limit: int) -> dict[str, dict[str, Any]]:
        """Up to `limit` of the job's pending rows, by key (in key order)."""

    def delete_inbox(self, project: str, job_id: str, key: str) -> None:
        """Remove the job's pending row `key` (folded); nothing when there is none."""
