"""The body and the answer of `POST /projects/{p}/jobs:batchPut` (web/api_jobs.py).

The body is `{"jobs": [{"id": JOB_ID, "job": PUT body}, ...]}`, at most MAX_BATCH_JOBS
entries, each id once; anything else about its shape refuses the whole request (400).
Each job's own problems (an invalid id or body, a config-defined job) are its result's.
"""

from __future__ import annotations

from typing import Any

from config.limits import MAX_BATCH_JOBS
from engine.batch_put import Outcome
from engine.operations import Put
from web.bodies import fields
from web.errors import STATUS, ApiError, classify


def batch_entries(body: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """The (job id, PUT body) pairs of a batch, in the order listed.

    :raises ApiError: the body is not a batch (INVALID_ARGUMENT).
    """
    listed = fields(body, {"jobs": list}).get("jobs")
    if listed is None:
        raise ApiError("INVALID_ARGUMENT", 'jobs: required, a list of {"id": ..., "job": {...}}')
    if len(listed) > MAX_BATCH_JOBS:
        raise ApiError("INVALID_ARGUMENT", f"jobs: {len(listed):,} entries; at most {MAX_BATCH_JOBS:,} "
                                           "are allowed in one request")
    pairs: list[tuple[str, dict[str, Any]]] = []
    for index, entry in enumerate(listed):
        pairs.append(_pair(index, entry))
    seen: set[str] = set()
    for job_id, _ in pairs:
        if job_id in seen:
            raise ApiError("INVALID_ARGUMENT", f"jobs: {job_id!r} is listed more than once")
        seen.add(job_id)
    return pairs


def _pair(index: int, entry: Any) -> tuple[str, dict[str, Any]]:
    where = f"jobs[{index}]"
    if not isinstance(entry, dict):
        raise ApiError("INVALID_ARGUMENT", f'{where}: expected an object {{"id": ..., "job": {{...}}}}')
    try:
        fields(entry, {"id": str, "job": dict})
    except ApiError as error:
        raise ApiError("INVALID_ARGUMENT", f"{where}: {error.message}") from None
    if entry.get("id") is None or entry.get("job") is None:
        raise ApiError("INVALID_ARGUMENT", f"{where}: both id and job are required")
    return entry["id"], entry["job"]


def batch_result(job_id: str, outcome: Outcome) -> dict[str, Any]:
    """One job's result: the HTTP status its PUT would have answered, and for a refusal
    the error object a PUT's answer holds (`code`, `message`, `details` when there are)."""
    if isinstance(outcome, Put):
        return {"id": job_id, "status": 201 if outcome.created else 200}
    code, message, details = classify(outcome)
    error: dict[str, Any] = {"code": code, "message": message}
    if details:
        error["details"] = details
    return {"id": job_id, "status": STATUS.get(code, 500), "error": error}
