"""The REST API under /api/v1 (CONTRACT section 5); this part reads."""

from __future__ import annotations

from flask import Blueprint, current_app, jsonify, request

from web.errors import ApiError
from web.views import invocation_view, job_view

api = Blueprint("api", __name__, url_prefix="/api/v1")

MAX_PAGE = 1000


def _store():
    return current_app.config["SUNDIAL_ENGINE"].store


def _project_or_404(project: str):
    row = _store().get_project(project)
    if row is None:
        raise ApiError("NOT_FOUND", f"project {project!r} not found")
    return row


def _job_or_404(project: str, job_id: str):
    _project_or_404(project)
    job = _store().get_job(project, job_id)
    if job is None:
        raise ApiError("NOT_FOUND", f"job {project}/{job_id} not found")
    return job


def _last_invocation(project: str, job_id: str):
    page, _ = _store().list_invocations(project, job_id, 1, None)
    return page[0] if page else None


@api.get("/projects")
def list_projects():
    store = _store()
    projects = [
        {"id": row.id, "job_count": len(store.list_jobs(row.id)), "config_error": row.config_error or None,
         "job_errors": row.job_errors}
        for row in store.list_projects()
    ]
    return jsonify({"projects": projects})


@api.get("/projects/<project>/jobs")
def list_jobs(project: str):
    _project_or_404(project)
    jobs = [job_view(job, _last_invocation(project, job.record.job_id)) for job in _store().list_jobs(project)]
    return jsonify({"jobs": jobs})


@api.get("/projects/<project>/jobs/<job_id>")
def get_job(project: str, job_id: str):
    job = _job_or_404(project, job_id)
    return jsonify(job_view(job, _last_invocation(project, job_id)))


@api.get("/projects/<project>/jobs/<job_id>/invocations")
def list_invocations(project: str, job_id: str):
    _job_or_404(project, job_id)
    raw_size = request.args.get("page_size", "50")
    if not raw_size.isdigit() or not 1 <= int(raw_size) <= MAX_PAGE:
        raise ApiError("INVALID_ARGUMENT", f"page_size must be a whole number from 1 to {MAX_PAGE}")
    page, token = _store().list_invocations(project, job_id, int(raw_size), request.args.get("page_token"))
    return jsonify({"invocations": [invocation_view(row) for row in page], "next_page_token": token})


@api.get("/projects/<project>/jobs/<job_id>/invocations/<invocation_id>")
def get_invocation(project: str, job_id: str, invocation_id: str):
    _job_or_404(project, job_id)
    row = _store().get_invocation(project, job_id, invocation_id)
    if row is None:
        raise ApiError("NOT_FOUND", f"invocation {invocation_id!r} of {project}/{job_id} not found")
    return jsonify(invocation_view(row, with_log=True))
