"""The REST API under /api/v1 (docs/REFERENCE.md section 5): reading projects, jobs and history.

The changes are in web/api_jobs.py, /validate and /openapi.json in web/api_meta.py.
"""

from __future__ import annotations

from typing import Any

from flask import Blueprint, jsonify, request
from flask.typing import ResponseReturnValue

from config.limits import MAX_PAGE_SIZE
from config.model import JOB_ID
from engine.ports import ProjectRow, StoredJob
from web import labels, page_tokens
from web.access import READ, authorize, readable
from web.context import current_engine, queries
from web.errors import ApiError
from web.views import audit_view, invocation_view, job_view

api = Blueprint("api", __name__, url_prefix="/api/v1")

DEFAULT_PAGE_SIZE = 50  # invocations
DEFAULT_JOBS_PAGE_SIZE = 100
DEFAULT_AUDIT_PAGE_SIZE = 100


def refuse_bad_job_id(endpoint: str | None, values: dict[str, Any] | None) -> None:
    """Every job path, whatever its method: an id no job can have is a 400 (as the
    OpenAPI document says), never a 404 or a 204 that reads as "done"."""
    job_id = (values or {}).get("job_id")
    if job_id is not None and not JOB_ID.fullmatch(job_id):
        raise ApiError("INVALID_ARGUMENT", f"{job_id[:120]!r} is not a valid job id: use 1 to 100 "
                                           "letters, digits, '_', '.' or '-', not only dots")


api.url_value_preprocessor(refuse_bad_job_id)


def project_or_404(project: str, permission: str = READ) -> ProjectRow:
    """The project, after the access check; every endpoint that names one starts here."""
    row = queries().project(project)
    authorize(row, permission)
    return row


def job_or_404(project: str, job_id: str, permission: str = READ) -> StoredJob:
    project_or_404(project, permission)
    return queries().job(project, job_id)


def full_job_view(job: StoredJob) -> dict[str, Any]:
    return job_view(job, queries().last_invocation(job), current_engine().clock.now())


@api.get("/projects")
def list_projects() -> ResponseReturnValue:
    projects = []
    for row in filter(readable, queries().projects()):
        projects.append({"id": row.id, "job_count": queries().job_count(row.id),
                         "config_error": row.config_error or None, "job_errors": row.job_errors})
    return jsonify({"projects": projects})


@api.get("/projects/<project>/jobs")
def list_jobs(project: str) -> ResponseReturnValue:
    """One page of jobs in id order (like the invocations: page_size, page_token); each
    job's last invocation comes from one query for the whole page."""
    project_or_404(project)
    try:
        wanted = labels.parse_filter(request.args.getlist("label"))
    except ValueError as error:
        raise ApiError("INVALID_ARGUMENT", str(error)) from None
    scope = f"jobs/{project}"
    page, token = queries().jobs_page(project, _page_size(DEFAULT_JOBS_PAGE_SIZE), _position(scope))
    # Filtered within the page: a page may hold fewer jobs than page_size, the token still goes on.
    page = [job for job in page if labels.matches(job.definition.labels, wanted)]
    last, now = queries().recent_invocations(page, 1), current_engine().clock.now()
    jobs = [job_view(job, next(iter(last.get(job.record.job_id, [])), None), now) for job in page]
    return jsonify({"jobs": jobs, "next_page_token": page_tokens.issue(scope, token)})


@api.get("/projects/<project>/jobs/<id:job_id>")
def get_job(project: str, job_id: str) -> ResponseReturnValue:
    return jsonify(full_job_view(job_or_404(project, job_id)))


@api.get("/projects/<project>/jobs/<id:job_id>/invocations")
def list_invocations(project: str, job_id: str) -> ResponseReturnValue:
    job_or_404(project, job_id)
    scope = f"invocations/{project}/{job_id}"
    page, token = queries().invocations(project, job_id, _page_size(), _position(scope))
    return jsonify({"invocations": [invocation_view(row) for row in page],
                    "next_page_token": page_tokens.issue(scope, token)})


def _position(scope: str) -> str | None:
    """Where the list `scope` resumes: its `page_token`, checked (web/page_tokens.py)."""
    return page_tokens.position(scope, request.args.get("page_token"))


def _page_size(default: int = DEFAULT_PAGE_SIZE) -> int:
    raw_size = request.args.get("page_size", str(default))
    if not (raw_size.isascii() and raw_size.isdigit()) or not 1 <= int(raw_size) <= MAX_PAGE_SIZE:
        raise ApiError("INVALID_ARGUMENT", f"page_size must be a whole number from 1 to {MAX_PAGE_SIZE}")
    return int(raw_size)


@api.get("/projects/<project>/jobs/<id:job_id>/invocations/<id:invocation_id>")
def get_invocation(project: str, job_id: str, invocation_id: str) -> ResponseReturnValue:
    job_or_404(project, job_id)
    row = queries().invocation(project, job_id, invocation_id)
    return jsonify(invocation_view(row, with_log=True))


@api.get("/projects/<project>/audit")
def list_audit(project: str) -> ResponseReturnValue:
    """The project's operator actions, newest first (?job=J: that job's only); readers of
    the project may read them, entries of deleted jobs included."""
    project_or_404(project)
    job_id = request.args.get("job")
    if job_id is not None:  # `job=` too: no job has an empty id, and no filter is no `job`
        refuse_bad_job_id(None, {"job_id": job_id})
    scope = f"audit/{project}/{job_id or ''}"
    page, token = queries().audit(project, job_id, _page_size(DEFAULT_AUDIT_PAGE_SIZE), _position(scope))
    return jsonify({"entries": [audit_view(entry) for entry in page],
                    "next_page_token": page_tokens.issue(scope, token)})
