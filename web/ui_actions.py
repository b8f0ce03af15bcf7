"""The web UI's buttons: Pause (with a reason), Resume, Trigger, Abort, Re-run (on an
invocation's page) and Backfill (a form with a range in UTC); each recorded in the audit
log with the signed-in caller (engine/audit.py), as through the API.

Each is a POST form carrying a CSRF token: a random value kept in the signed session
cookie and repeated in a hidden field; a POST whose field does not match is refused
(403) before anything else happens. The session cookie is SameSite=Lax as well, but
the token is what a cross-site form cannot forge.

Each action asks web/access.py for the permission the API asks for, and runs the
API's use case (engine/operations.py); the answer is a redirect (303) to the job's
page with a one-line message of what happened.
"""

from __future__ import annotations

from datetime import datetime

from flask import Blueprint, flash, redirect, request, url_for
from flask.typing import ResponseReturnValue

from config.limits import MAX_REASON_CHARS
from engine import operations as ops
from engine.backfills import backfill_job
from engine.errors import Refused
from statemachine.backfill import BackfillError
from statemachine.durations import UTC
from statemachine.machine import InvalidTransition
from web.access import OWN, TRIGGER, actor
from web.context import current_engine
from web.errors import ApiError
from web.sessions import csrf_matches
from web.ui import error_pages, readable_project

actions = Blueprint("ui_actions", __name__)
error_pages(actions)

JOB = "/p/<project>/<id:job_id>"


@actions.before_request
def check_csrf() -> None:
    if not csrf_matches():
        raise ApiError("PERMISSION_DENIED", "the form's security token is missing or stale; "
                                            "reload the page and try again")


def _reason() -> str:
    reason = request.form.get("reason", "").strip()
    if len(reason) > MAX_REASON_CHARS:
        raise ApiError("INVALID_ARGUMENT", f"the reason is longer than {MAX_REASON_CHARS:,} characters")
    return reason


def _back(project: str, job_id: str, message: str, category: str = "ok") -> ResponseReturnValue:
    flash(message, category)
    return redirect(url_for("ui.job_page", project=project, job_id=job_id), code=303)


@actions.post(JOB + ":pause")
def pause(project: str, job_id: str) -> ResponseReturnValue:
    readable_project(project, TRIGGER)
    reason = _reason()
    ops.pause(current_engine(), project, job_id, reason, actor=actor())
    return _back(project, job_id, "Paused" + (f": {reason}" if reason else "."))


@actions.post(JOB + ":resume")
def resume(project: str, job_id: str) -> ResponseReturnValue:
    readable_project(project, TRIGGER)
    ops.resume(current_engine(), project, job_id, actor=actor())
    return _back(project, job_id, "Resumed.")


@actions.post(JOB + ":trigger")
def trigger(project: str, job_id: str) -> ResponseReturnValue:
    readable_project(project, TRIGGER)
    try:
        row = ops.trigger(current_engine(), project, job_id, actor=actor())
    except (Refused, InvalidTransition) as refused:
        # A paused job refuses a trigger (409): say so on the job's page.
        return _back(project, job_id, f"Not triggered: {refused}", "error")
    reason = f" ({row.reason})" if row.reason else ""
    return _back(project, job_id, f"Triggered: invocation {row.id} is {row.status}{reason}.")


@actions.post(JOB + ":abort")
def abort(project: str, job_id: str) -> ResponseReturnValue:
    readable_project(project, OWN)
    ops.abort(current_engine(), project, job_id, _reason() or "aborted from the web UI", actor=actor())
    return _back(project, job_id, "Aborted the active invocations.")



@actions.post(JOB + "/<id:invocation_id>:rerun")
def rerun(project: str, job_id: str, invocation_id: str) -> ResponseReturnValue:
    """A new invocation with this one's scheduled time; the answer is the new one's page."""
    readable_project(project, TRIGGER)
    engine = current_engine()
    earlier = engine.queries.invocation(project, job_id, invocation_id)
    try:
        row = ops.trigger(engine, project, job_id, scheduled_time=earlier.scheduled_time, actor=actor())
    except (Refused, InvalidTransition) as refused:
        flash(f"Not re-run: {refused}", "error")
        return redirect(url_for("ui.invocation_page", project=project, job_id=job_id,
                                invocation_id=invocation_id), code=303)
    flash(f"Re-run of {invocation_id}: invocation {row.id} is {row.status}.", "ok")
    return redirect(url_for("ui.invocation_page", project=project, job_id=job_id, invocation_id=row.id), code=303)


@actions.post(JOB + ":backfill")
def backfill(project: str, job_id: str) -> ResponseReturnValue:
    readable_project(project, TRIGGER)
    try:
        done = backfill_job(current_engine(), project, job_id, _utc_field("start"), _utc_field("end"), actor=actor())
    except (Refused, InvalidTransition, BackfillError) as refused:
        return _back(project, job_id, f"Not backfilled: {refused}", "error")
    count = len(done.invocations)
    if not count:
        return _back(project, job_id, "Backfill: the schedule has no fire time in that range.", "error")
    return _back(project, job_id, f"Backfill started: {count:,} invocation{'s' if count > 1 else ''}, "
                                  "one after another.")


def _utc_field(name: str) -> datetime:
    """A datetime-local field of the Backfill form, which says its times are UTC."""
    value = request.form.get(name, "").strip()
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise BackfillError(f"{name}: {value!r} is not a date and time") from None
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment
