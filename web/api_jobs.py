"""The REST API's changes (docs/REFERENCE.md section 5): API-managed jobs, the operator's
actions, and async completion. The use cases are engine/operations.py; this module
reads requests, asks web/access.py, and shapes answers."""

from __future__ import annotations

from typing import Any

from flask import Blueprint, current_app, jsonify, request, url_for
from flask.typing import ResponseReturnValue

from config.limits import MAX_JOBS_PER_PROJECT, MAX_MESSAGE_CHARS, MAX_REASON_CHARS, MAX_REQUEST_ID_CHARS
from config.loader import ProjectConfigError, parse_job_entry
from engine import operations as ops
from engine.backfills import backfill_job
from engine.batch_put import put_jobs
from engine.masking import MaskedValues, unmasked_entry
from engine.ports import ProjectRow, StoredJob
from engine.queries import visible
from engine.secrets import LocalSecrets, secret_names
from statemachine.definition import JobDefinition
from statemachine.errors import SundialError
from statemachine.vocabulary import InvocationStatus
from web.access import OWN, TRIGGER, actor
from web.api import full_job_view, project_or_404, refuse_bad_job_id
from web.batch_bodies import batch_entries, batch_result
from web.bodies import fields, instant, json_object, optional_instant, text
from web.context import current_engine, queries
from web.errors import ApiError
from web.views import invocation_view

jobs_api = Blueprint("api_jobs", __name__, url_prefix="/api/v1")
jobs_api.url_value_preprocessor(refuse_bad_job_id)

JOB = "/projects/<project>/jobs/<id:job_id>"
COMPLETION_HEADER = "X-Sundial-Completion-Token"


@jobs_api.put(JOB)
def put_job(project: str, job_id: str) -> ResponseReturnValue:
    row = project_or_404(project, OWN)
    stored = queries().stored_job(project, job_id)  # one read for the masks and the use case
    entry = _put_entry(row, job_id, json_object(), stored)
    put = ops.put_job(current_engine(), project, job_id, entry.policy, entry.definition, entry.disabled,
                      MAX_JOBS_PER_PROJECT, actor=actor(), row=row, read=stored)
    response = jsonify(full_job_view(put.job))
    if put.created:
        response.status_code = 201
        response.headers["Location"] = url_for("api.get_job", project=project, job_id=job_id)
    return response


@jobs_api.post("/projects/<project>/jobs:batchPut")
def batch_put(project: str) -> ResponseReturnValue:
    """Each listed job put as its own PUT would put it (engine/batch_put.py); one result
    per job, in the order listed, with the status and error its PUT would have answered."""
    row = project_or_404(project, OWN)
    listed = batch_entries(json_object())
    refused: dict[str, SundialError] = {}
    entries: dict[str, ops.PutEntry] = {}
    read: dict[str, StoredJob | None] = {}
    for job_id, body in listed:
        try:
            refuse_bad_job_id(None, {"job_id": job_id})  # (a PUT's path is checked as it is routed)
            read[job_id] = queries().stored_job(project, job_id)
            entries[job_id] = _put_entry(row, job_id, body, read[job_id])
        except ApiError as error:
            refused[job_id] = error
    outcomes = put_jobs(current_engine(), project, entries, MAX_JOBS_PER_PROJECT, actor=actor(), row=row,
                        read=read)
    return jsonify({"results": [batch_result(job_id, refused.get(job_id) or outcomes[job_id])
                                for job_id, _ in listed]})


def _put_entry(row: ProjectRow, job_id: str, body: dict[str, Any], stored: StoredJob | None | ops.Unread = ops.UNREAD,
               ) -> ops.PutEntry:
    """A PUT body, validated as a config file's entry is; `stored`: the job's row as read
    just before (None: no row), else it is read here.

    :raises ApiError: it does not validate (INVALID_ARGUMENT, one detail per problem).
    """
    if isinstance(stored, ops.Unread):
        stored = queries().stored_job(row.id, job_id)
    entry = _unmasked(body, stored if stored is not None and visible(stored) else None)
    settings = current_app.config["SUNDIAL_SETTINGS"]
    try:
        # Known jobs are not checked here: operations checks triggers against the store.
        # Sundial's own service as this server runs, and the identities granted to the project.
        job = parse_job_entry(entry, row.settings, job_id, backend=settings.backend, own=settings.own_service,
                              project_id=row.id)
    except ProjectConfigError as failure:
        messages = [error.message for error in failure.errors]
        raise ApiError("INVALID_ARGUMENT", "; ".join(messages), messages) from None
    _refuse_unknown_secrets(row.id, job.definition)
    return ops.PutEntry(job.policy, job.definition, job.disabled)


def _unmasked(entry: dict[str, Any], stored: StoredJob | None) -> dict[str, Any]:
    """The body with the stored values of the visible job `stored` back for the masks a GET
    showed (engine/masking.py), so that an owner's GET and PUT of the same job sends what it
    sent before."""
    try:
        return unmasked_entry(entry, None if stored is None else stored.definition)
    except MaskedValues as failure:
        raise ApiError("INVALID_ARGUMENT", str(failure), failure.messages) from None


def _refuse_unknown_secrets(project: str, definition: JobDefinition) -> None:
    """A secret the project does not have is a validation error where the store can tell."""
    secrets = current_engine().deliveries.secrets
    if not isinstance(secrets, LocalSecrets):  # (Secret Manager's are not listed: a send tells)
        return
    missing = [f"{where}: unknown secret {name} (project {project} has no secret of that name)"
               for where, name in secret_names(definition) if not secrets.exists(project, name)]
    if missing:
        raise ApiError("INVALID_ARGUMENT", "; ".join(missing), missing)


@jobs_api.delete(JOB)
def delete_job(project: str, job_id: str) -> ResponseReturnValue:
    project_or_404(project, OWN)
    ops.delete_job(current_engine(), project, job_id, allow_missing=_flag("allow_missing"), actor=actor())
    return "", 204


@jobs_api.post(JOB + ":pause")
def pause(project: str, job_id: str) -> ResponseReturnValue:
    project_or_404(project, TRIGGER)
    body = fields(json_object(optional=True), {"reason": str})
    reason = text(body, "reason", MAX_REASON_CHARS)
    return jsonify(full_job_view(ops.pause(current_engine(), project, job_id, reason, actor=actor())))


@jobs_api.post(JOB + ":resume")
def resume(project: str, job_id: str) -> ResponseReturnValue:
    project_or_404(project, TRIGGER)
    fields(json_object(optional=True), {})
    return jsonify(full_job_view(ops.resume(current_engine(), project, job_id, actor=actor())))


@jobs_api.post(JOB + ":abort")
def abort(project: str, job_id: str) -> ResponseReturnValue:
    project_or_404(project, OWN)
    body = fields(json_object(optional=True), {"reason": str})
    reason = text(body, "reason", MAX_REASON_CHARS)
    return jsonify(full_job_view(ops.abort(current_engine(), project, job_id, reason, actor=actor())))


@jobs_api.post(JOB + ":trigger")
def trigger(project: str, job_id: str) -> ResponseReturnValue:
    project_or_404(project, TRIGGER)
    body = fields(json_object(optional=True), {"request_id": str, "scheduled_time": str})
    request_id = text(body, "request_id", MAX_REQUEST_ID_CHARS)
    history = current_app.config["SUNDIAL_SETTINGS"].history  # a re-run stays within the job's history
    row = ops.trigger(current_engine(), project, job_id, request_id or None,
                      scheduled_time=optional_instant(body, "scheduled_time"), actor=actor(), history=history)
    return jsonify(invocation_view(row))


@jobs_api.post(JOB + ":backfill")
def backfill(project: str, job_id: str) -> ResponseReturnValue:
    project_or_404(project, TRIGGER)  # the same role as a trigger: it is many triggers
    body = fields(json_object(), {"start": str, "end": str, "request_id": str})
    done = backfill_job(current_engine(), project, job_id, instant(body, "start"), instant(body, "end"),
                        text(body, "request_id", MAX_REQUEST_ID_CHARS) or None, actor=actor())
    return jsonify({"count": len(done.invocations), "invocations": done.invocations})


@jobs_api.post(JOB + "/invocations/<id:invocation_id>:complete")
def complete(project: str, job_id: str, invocation_id: str) -> ResponseReturnValue:
    # No access check: the caller is a target, and the token is its proof.
    token = _completion_token()
    body = fields(json_object(), {"status": str, "message": str})
    status = body.get("status")
    if status not in (InvocationStatus.SUCCEEDED, InvocationStatus.FAILED):
        raise ApiError("INVALID_ARGUMENT", f"status must be SUCCEEDED or FAILED, got {status!r}")
    message = text(body, "message", MAX_MESSAGE_CHARS)
    succeeded = status == InvocationStatus.SUCCEEDED
    row = ops.complete(current_engine(), project, job_id, invocation_id, token, succeeded, message)
    return jsonify(invocation_view(row))


def _completion_token() -> str:
    """The token of X-Sundial-Completion-Token, else of `Authorization: Bearer`.

    The dedicated header comes first: with API tokens configured, Authorization may
    carry the caller's own credentials.
    """
    token = request.headers.get(COMPLETION_HEADER, "").strip()
    if token:
        return token
    scheme, _, credentials = request.headers.get("Authorization", "").partition(" ")
    return credentials.strip() if scheme.lower() == "bearer" else ""


def _flag(name: str) -> bool:
    raw = request.args.get(name, "false").lower()
    if raw not in ("true", "false", "1", "0"):
        raise ApiError("INVALID_ARGUMENT", f"{name} must be true or false, got {raw!r}")
    return raw in ("true", "1")
