"""GET /metrics: Prometheus' text format (counters of every serve process, gauges read now).

A project's series are shown only to callers who may read the project (docs/REFERENCE.md section 6):
to anyone else the project does not exist, here as in the API."""

from __future__ import annotations

from functools import partial

from flask import Blueprint, Response, current_app
from flask.typing import ResponseReturnValue

from engine.metrics import JobSeriesCache, Series, job_gauges
from engine.ports import StoredJob
from web.access import readable
from web.context import current_engine, queries

metrics_page = Blueprint("metrics", __name__)

JOB_SERIES_TTL = 60.0  # seconds the per-job series of a project are reused (engine/metrics.py)


@metrics_page.get("/metrics")
def metrics() -> ResponseReturnValue:
    gauges: list[Series] = []
    depth = current_app.config.get("SUNDIAL_QUEUE_DEPTH")
    if depth is not None:  # the cloud backend's queue is Cloud Tasks' to report
        gauges.append(("sundial_queue_depth", {}, depth()))
    projects = list(filter(readable, queries().projects()))
    readable_projects = [project.id for project in projects]
    for project in readable_projects:
        gauges.append(("sundial_jobs", {"project": project}, queries().job_count(project)))
    for row in projects:
        errors = 1 if row.config_error else len(row.job_errors)
        gauges.append(("sundial_project_config_errors", {"project": row.id}, errors))
    cache = _job_series()
    job_rows = [row for project in readable_projects
                for row in cache.rows(project, partial(queries().jobs, project))]
    job_rows.sort(key=lambda row: row[0])  # each family's rows together, across projects
    gauges += job_rows
    text = current_engine().metrics.render(gauges)
    return Response(text, content_type="text/plain; version=0.0.4; charset=utf-8")


def _job_series() -> JobSeriesCache:
    """The app's cache of per-job series, each computed at the time of its read on the
    engine's clock (a large project's kept for JOB_SERIES_TTL)."""
    cache: JobSeriesCache | None = current_app.extensions.get("sundial_job_series")
    if cache is None:
        clock = current_engine().clock

        def summarize(jobs: list[StoredJob]) -> list[Series]:
            return job_gauges(jobs, clock.now())
        cache = current_app.extensions.setdefault("sundial_job_series", JobSeriesCache(JOB_SERIES_TTL,
                                                                                       summarize=summarize))
    return cache
