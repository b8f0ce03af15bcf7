"""The web UI's pages (docs/REFERENCE.md section 7): server-rendered HTML over the API's use cases.

    /                         the jobs that need attention (web/attention.py), and the projects
    /p/PROJECT                its jobs, a page at a time (?q=id prefix, ?state=failing..., ?page_token=)
    /p/PROJECT/JOB            one job: definition, next fire times, actions, charts, history (?tz=, ?refresh=)
    /p/PROJECT/JOB/INVOCATION one invocation: timeline, attempts, request, answers

Every page reads through engine/operations.py and the store's paged reads, and asks
web/access.py first, as the API does; the buttons are in web/ui_actions.py. Each page
costs a bounded number of reads, whatever the size of the project or the history.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

from flask import Blueprint, current_app, render_template, request, url_for
from flask.typing import ResponseReturnValue
from werkzeug.exceptions import HTTPException

from engine.masking import masked_definition
from engine.metrics import JobSeriesCache
from engine.ports import InvocationRow, ProjectRow, StoredJob
from statemachine.shown import shown_state
from web import access, attention, labels, ui_charts, ui_filters, ui_format
from web.access import OWN, READ, TRIGGER
from web.context import current_engine, queries
from web.errors import KNOWN_ERRORS, STATUS, ApiError, classify, http_code

log = logging.getLogger("sundial.ui")

ui = Blueprint("ui", __name__, template_folder="templates", static_folder="static",
               static_url_path="/ui/static")

ui.add_app_template_global(ui_filters.duration_text, "duration")
ui.add_app_template_global(ui_filters.lateness, "lateness")
ui.add_app_template_global(ui_format.active_since, "active_since")

JOBS_PAGE_SIZE = 50
HISTORY_PAGE_SIZE = 50
STRIP_LENGTH = 10  # recent outcomes shown per job in the jobs list
JOB_FACTS_TTL = 60.0  # seconds a large project's facts for the attention list are reused


def readable_project(project: str, permission: str = READ) -> ProjectRow:
    row = queries().project(project)
    access.authorize(row, permission)
    return row


def buttons(row: ProjectRow) -> dict[str, bool]:
    """Which actions the caller may take: the template shows only these."""
    return {"trigger": access.may(row, TRIGGER), "own": access.may(row, OWN)}


@ui.get("/")
def projects() -> ResponseReturnValue:
    # A project the caller may not read does not exist for them.
    rows = [row for row in queries().projects() if access.may(row, READ)]
    shown = [{"row": row, "job_count": queries().job_count(row.id)} for row in rows]
    lines, more = attention.attention(rows, _job_facts(rows), current_engine().clock.now(), attention.ATTENTION_LIMIT)
    return render_template("ui/projects.html", projects=shown, attention=lines, attention_more=more,
                           now=current_engine().clock.now())


def _job_facts(rows: list[ProjectRow]) -> list[attention.JobFacts]:
    """Every readable job's facts: a project of 1,000 jobs or more is read at most once a
    minute (engine/metrics.py's JobSeriesCache, as /metrics does), a smaller one afresh."""
    cache = current_app.extensions.setdefault(
        "sundial_job_attention", JobSeriesCache(JOB_FACTS_TTL, summarize=attention.facts))
    return [fact for row in rows for fact in cache.rows(row.id, lambda project=row.id: queries().jobs(project))]


@ui.get("/p/<project>")
def jobs(project: str) -> ResponseReturnValue:
    row = readable_project(project)
    prefix = request.args.get("q", "").strip()
    token = request.args.get("page_token") or None
    state = request.args.get("state", "")
    if state and state not in ui_filters.JOB_FILTERS:
        raise ApiError("INVALID_ARGUMENT", f"no state filter {state!r}; choose one of "
                                           + ", ".join(ui_filters.JOB_FILTERS))
    now = current_engine().clock.now()

    def read(at: str | None) -> tuple[list[StoredJob], str | None]:
        return queries().jobs_page(project, JOBS_PAGE_SIZE, at, prefix)

    if state:
        page, next_token = ui_filters.filtered_page(read, token, lambda job: ui_filters.JOB_FILTERS[state](job, now),
                                                    JOBS_PAGE_SIZE)
    else:
        page, next_token = read(token)
    try:  # the job page's label tags link here
        wanted = labels.parse_filter(request.args.getlist("label"))
    except ValueError:
        wanted = []
    page = [job for job in page if labels.matches(job.definition.labels, wanted)]
    recent = queries().recent_invocations(page, STRIP_LENGTH)
    lines = [_job_line(job, recent.get(job.record.job_id, []), now) for job in page]
    return render_template("ui/jobs.html", project=row, lines=lines, prefix=prefix, state_filter=state,
                           state_filters=ui_filters.JOB_FILTERS, next_token=next_token, paged=bool(token),
                           job_count=queries().job_count(project), now=now)


def _job_line(job: StoredJob, recent: list[InvocationRow], now: datetime) -> dict[str, Any]:
    definition = job.definition
    return {
        "job": job,
        "id": job.record.job_id,
        "schedule": ui_format.schedule_text(definition),
        "plain": ui_format.plain_schedule(definition),
        "timezone": definition.timezone,
        "job_state": shown_state(job.record, now),
        "next_run": ui_format.next_run(job, now),
        "last": ui_format.last_result(recent),
        "last_success": job.record.last_succeeded_at,
        # Of the newest invocation that started: its first attempt's start after its scheduled time.
        "lateness": next((ui_filters.lateness(row) for row in recent if row.started_time is not None), None),
        "strip": list(reversed(recent)),  # oldest first, so it reads left to right
    }


@ui.get("/p/<project>/<id:job_id>")
def job_page(project: str, job_id: str) -> ResponseReturnValue:
    row = readable_project(project)
    job = queries().job(project, job_id)
    status = request.args.get("status", "")
    if status and status not in ui_format.STATUS_FILTERS:
        raise ApiError("INVALID_ARGUMENT", f"no status filter {status!r}; choose one of "
                                           + ", ".join(ui_format.STATUS_FILTERS))
    token = request.args.get("page_token") or None
    now = current_engine().clock.now()
    statuses = ui_format.STATUS_FILTERS[status] if status else ()
    history, next_token = queries().invocations(project, job_id, HISTORY_PAGE_SIZE, token, statuses)
    definition = masked_definition(job.definition)  # credentials, for every reader (engine/masking.py)
    return render_template(
        "ui/job.html", **_view_choices(project, job_id, definition.timezone), charts=ui_charts.charts(history),
        project=row, job=job, record=job.record, job_state=shown_state(job.record, now), definition=definition,
        schedule=ui_format.schedule_text(definition), plain=ui_format.plain_schedule(definition),
        timezone=definition.timezone, next_run=ui_format.next_run(job, now),
        fire_times=ui_format.next_fire_times(job, now), policies=ui_format.policies(definition),
        definition_yaml=ui_format.definition_yaml(definition), history=history, status_filter=status,
        filters=ui_format.STATUS_FILTERS, next_token=next_token, paged=bool(token),
        config_file=f"{project}.yaml", can=buttons(row), now=now,
    )


def _view_choices(project: str, job_id: str, timezone: str) -> dict[str, Any]:
    """`?tz=utc|job` (UTC by default, as every other time in the UI and the logs) and
    `?refresh=SECONDS` (off by default), and `here(**changes)`: this page's URL with
    some query parameters changed (None drops one)."""
    tz = request.args.get("tz") or "utc"
    if tz not in ("utc", "job"):
        raise ApiError("INVALID_ARGUMENT", f"tz must be utc or job, not {tz!r}")
    try:
        refresh = ui_filters.refresh_seconds(request.args.get("refresh"))
    except ValueError as error:
        raise ApiError("INVALID_ARGUMENT", str(error)) from None
    zone = timezone if tz == "job" else "UTC"

    def here(**changes: str | None) -> str:
        args = {**request.args.to_dict(), **changes}
        # Any: url_for's keywords mix its own options with the route's values.
        kept: dict[str, Any] = {key: value for key, value in args.items() if value is not None}
        return url_for("ui.job_page", project=project, job_id=job_id, **kept)

    return {"tz": tz, "refresh": refresh, "here": here, "at": lambda value: ui_filters.zoned_text(value, zone)}


@ui.get("/p/<project>/<id:job_id>/<id:invocation_id>")
def invocation_page(project: str, job_id: str, invocation_id: str) -> ResponseReturnValue:
    row = readable_project(project)
    job = queries().job(project, job_id)
    invocation = queries().invocation(project, job_id, invocation_id)
    return render_template(
        "ui/invocation.html", project=row, job=job, inv=invocation,
        attempts=ui_format.attempts(invocation.log), request_sent=ui_format.request_sent(
            job, invocation, current_engine().deliveries.service_host),
        timezone=job.definition.timezone, can=buttons(row), now=current_engine().clock.now(),
    )


# --- errors as pages ------------------------------------------------------------------------

def _page(code: str, message: str) -> ResponseReturnValue:
    status = STATUS.get(code, 500)
    return render_template("ui/error.html", code=code, status=status, message=message), status


def error_pages(blueprint: Blueprint) -> None:
    """Errors of the blueprint's views as HTML pages, with the API's status codes."""
    for kind in KNOWN_ERRORS:
        blueprint.register_error_handler(kind, lambda e: _page(*classify(e)[:2]))
    blueprint.register_error_handler(HTTPException, lambda e: _page(http_code(e), e.description or e.name))
    blueprint.register_error_handler(Exception, _unexpected)


def _unexpected(error: Exception) -> ResponseReturnValue:
    log.error("ui error", exc_info=error, extra={"fields": {"path": request.path}})
    return _page("INTERNAL", "internal error; the server's log has the details")


error_pages(ui)
