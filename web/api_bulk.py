"""Bulk pause and resume (docs/REFERENCE.md section 5): `POST /projects/{p}/jobs:pause`
and `:resume`, for every job of the project or those with given labels.

The same permission as one job's pause or resume (triggerers), and each job acted on is
changed and audited as if paused or resumed on its own (engine/bulk.py). The answer
names the ids acted on and, for every selected job, what became of it.
"""

from __future__ import annotations

from typing import Any

from flask import Blueprint, jsonify
from flask.typing import ResponseReturnValue

from config.limits import MAX_REASON_CHARS
from engine import bulk
from web import labels
from web.access import TRIGGER, actor
from web.api import project_or_404
from web.bodies import fields, json_object, text
from web.context import current_engine
from web.errors import ApiError, classify

bulk_api = Blueprint("api_bulk", __name__, url_prefix="/api/v1")

JOBS = "/projects/<project>/jobs"


@bulk_api.post(JOBS + ":pause")
def pause_jobs(project: str) -> ResponseReturnValue:
    project_or_404(project, TRIGGER)
    selected, reason = _request()
    return _answer(bulk.pause_jobs(current_engine(), project, selected, reason, actor=actor()))


@bulk_api.post(JOBS + ":resume")
def resume_jobs(project: str) -> ResponseReturnValue:
    project_or_404(project, TRIGGER)
    selected, reason = _request()
    return _answer(bulk.resume_jobs(current_engine(), project, selected, reason, actor=actor()))


def _request() -> tuple[bulk.Selected, str]:
    """The body `{"label"?, "reason"?}`: `label` one selector or a list of them, each
    `KEY=VALUE`, `KEY:VALUE` or `KEY` (any value), all of which a job must match; no
    label selects every job of the project."""
    body = fields(json_object(optional=True), {"label": object, "reason": str})
    raw = body.get("label")
    selectors = [raw] if isinstance(raw, str) else raw if raw is not None else []
    if not isinstance(selectors, list) or not all(isinstance(one, str) for one in selectors):
        raise ApiError("INVALID_ARGUMENT", "label: expected a string such as \"team=data\", or a list of them")
    try:
        wanted = labels.parse_filter(selectors)
    except ValueError as error:
        raise ApiError("INVALID_ARGUMENT", str(error)) from None
    return (lambda job: labels.matches(job.definition.labels, wanted)), text(body, "reason", MAX_REASON_CHARS)


def _answer(results: list[bulk.BulkResult]) -> ResponseReturnValue:
    shown: list[dict[str, Any]] = []
    for result in results:
        entry: dict[str, Any] = {"id": result.job_id, "outcome": result.outcome}
        if result.error is not None:
            code, message, _ = classify(result.error)
            entry["error"] = {"code": code, "message": message}
        shown.append(entry)
    acted = [result.job_id for result in results if result.outcome in (bulk.PAUSED, bulk.RESUMED)]
    return jsonify({"ids": acted, "results": shown})
