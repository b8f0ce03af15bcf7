"""GET /metrics: Prometheus text with what the engine did and what is waiting."""

import json
import re

from engine.metrics import Metrics, job_gauges
from engine.ports import DeliveryResult
from statemachine import events as ev
from tests.engine.harness import START as NOW


def _value(text: str, line_start: str) -> float:
    rows = [line for line in text.splitlines() if line.startswith(line_start + " ")]
    assert len(rows) == 1, f"{line_start!r} in\n{text}"
    return float(rows[0].split()[-1])


def test_metrics_count_deliveries_skips_and_lateness(api):
    api.app.config["SUNDIAL_QUEUE_DEPTH"] = api.queue.pending
    api.target.answers = [DeliveryResult("succeeded"), DeliveryResult("failed", "http 500")]
    api.until(120.5)  # the every-minute config job: 10:01 and 10:02
    api.engine.changes.apply("demo", "from-config", ev.Paused())
    api.until(300)
    api.engine.changes.apply("demo", "from-config", ev.Resumed())
    api.until(301)  # the resume's tick records 10:03 .. 10:05 as paused
    response = api.get("/metrics")
    assert response.status_code == 200
    assert response.headers["Content-Type"].startswith("text/plain; version=0.0.4")
    text = response.get_data(as_text=True)
    assert _value(text, 'sundial_deliveries_total{outcome="succeeded"}') == 1
    assert _value(text, 'sundial_deliveries_total{outcome="failed"}') == 1
    assert _value(text, 'sundial_skips_total{reason="paused"}') == 3
    assert _value(text, 'sundial_invocations_finished_total{status="FAILED"}') == 1
    assert _value(text, "sundial_lateness_seconds_count") == 2
    assert _value(text, 'sundial_lateness_seconds_bucket{le="0.01"}') == 2  # fake clock: on time
    assert _value(text, 'sundial_jobs{project="demo"}') == 1
    assert _value(text, "sundial_queue_depth") == api.queue.pending()
    assert "# TYPE sundial_lateness_seconds histogram" in text


def test_the_histogram_is_cumulative_and_labels_are_escaped():
    metrics = Metrics()
    for seconds in (0.005, 0.2, 3.0, 120.0):
        metrics.observe_lateness(seconds)
    metrics.inc("sundial_skips_total", reason='say "why"\n')
    text = metrics.render([])
    assert _value(text, 'sundial_lateness_seconds_bucket{le="0.01"}') == 1
    assert _value(text, 'sundial_lateness_seconds_bucket{le="0.25"}') == 2
    assert _value(text, 'sundial_lateness_seconds_bucket{le="5.0"}') == 3
    assert _value(text, 'sundial_lateness_seconds_bucket{le="+Inf"}') == 4
    assert _value(text, "sundial_lateness_seconds_sum") == 123.205
    assert 'sundial_skips_total{reason="say \\"why\\"\\n"} 1' in text


def test_other_processes_snapshots_add_to_this_ones_counts():
    snapshots: list[dict] = []
    parent, child = Metrics(other_processes=[lambda: snapshots]), Metrics()
    parent.inc("sundial_deliveries_total", outcome="succeeded")
    child.inc("sundial_deliveries_total", 3, outcome="succeeded")
    child.inc("sundial_skips_total", reason="overlap")
    parent.observe_lateness(0.005)
    child.observe_lateness(0.2)
    snapshots.append(json.loads(json.dumps(child.snapshot())))  # as it crosses the pipe
    text = parent.render([])
    assert _value(text, 'sundial_deliveries_total{outcome="succeeded"}') == 4
    assert _value(text, 'sundial_skips_total{reason="overlap"}') == 1
    assert _value(text, 'sundial_lateness_seconds_bucket{le="0.01"}') == 1
    assert _value(text, 'sundial_lateness_seconds_bucket{le="0.25"}') == 2
    assert _value(text, "sundial_lateness_seconds_count") == 2
    assert abs(_value(text, "sundial_lateness_seconds_sum") - 0.205) < 1e-9
    assert parent.counter("sundial_deliveries_total", outcome="succeeded") == 1  # its own, unchanged


def test_per_job_series_are_reused_for_their_ttl_then_read_again():
    from dataclasses import replace

    from engine.metrics import JobSeriesCache
    from engine.ports import StoredJob
    from statemachine.record import new_record

    now = [0.0]
    reads = []
    job = StoredJob(replace(new_record("p", "j"), disabled=False, paused=True), None, "config")  # type: ignore[arg-type]
    gone = StoredJob(new_record("p", "removed"), None, "config")  # type: ignore[arg-type]  # disabled: no series

    def jobs():
        reads.append(now[0])
        return [job, gone]

    cache = JobSeriesCache(ttl=60, clock=lambda: now[0], small=2, summarize=lambda jobs: job_gauges(jobs, NOW))
    first = cache.rows("p", jobs)
    assert first == [("sundial_job_consecutive_failures", {"project": "p", "job": "j"}, 0),
                     ("sundial_job_paused", {"project": "p", "job": "j"}, 1)]
    now[0] = 59.9
    assert cache.rows("p", jobs) == first and reads == [0.0]
    now[0] = 60.0
    cache.rows("p", jobs)
    assert reads == [0.0, 60.0]


def test_a_small_projects_per_job_series_are_read_at_every_scrape():
    """A job paused a second ago shows paused at the next scrape: only projects whose
    reads would cost much (1,000 jobs and more by default) are reused."""
    from engine.metrics import JobSeriesCache
    from engine.ports import StoredJob
    from statemachine.record import new_record

    reads = []

    def jobs():
        reads.append(1)
        return [StoredJob(new_record("p", "j"), None, "config")]  # type: ignore[arg-type]

    cache = JobSeriesCache(ttl=60, clock=lambda: 0.0, summarize=lambda jobs: job_gauges(jobs, NOW))
    cache.rows("p", jobs)
    cache.rows("p", jobs)
    assert len(reads) == 2


def test_lateness_counts_from_the_nominal_time_plus_the_jitter(api):
    api.write_config("demo", "jobs:\n  - id: from-config\n    schedule: every 1m\n    jitter: 50s\n"
                             "    target: {noop: {}}\n")
    api.until(180.5)
    text = api.get("/metrics").get_data(as_text=True)
    delivered = _value(text, "sundial_lateness_seconds_count")
    assert delivered >= 2
    assert _value(text, 'sundial_lateness_seconds_bucket{le="0.01"}') == delivered  # each on its jittered time
    assert _value(text, "sundial_lateness_seconds_sum") < 0.01 * delivered


def test_a_backfill_is_not_counted_as_late(api):
    # Its runs stand for past times on purpose; counting them would page someone for
    # "late deliveries" days late after every backfill.
    api.write_config("demo", "jobs:\n  - id: from-config\n    schedule: every 1m\n    target: {noop: {}}\n")
    api.until(60.5)
    before = _value(api.get("/metrics").get_data(as_text=True), "sundial_lateness_seconds_count")
    response = api.post("from-config", ":backfill", {"start": "2026-01-04T10:00:00Z", "end": "2026-01-04T10:03:00Z"})
    assert response.status_code == 200 and response.get_json()["count"] == 3
    api.until(61.5)
    text = api.get("/metrics").get_data(as_text=True)
    assert _value(text, 'sundial_deliveries_total{outcome="succeeded"}') >= before + 3
    assert _value(text, "sundial_lateness_seconds_count") == before


PERIODS = """\
jobs:
  - {id: daily, schedule: "0 3 * * *", target: {noop: {}}}
  - {id: hourly, schedule: "@hourly", target: {noop: {}}}
  - {id: beat, schedule: every 10s, target: {noop: {}}}
  - {id: relative, schedule: with 5m interval, timeout: 2m, target: {noop: {}}}
  - {id: weekdays, schedule: "0 9 * * MON-FRI", target: {noop: {}}}
  - {id: by-hand, schedule: triggered, target: {noop: {}}}
  - {id: once, at: ["2026-02-01T00:00:00Z"], target: {noop: {}}}
  - {id: held, schedule: "0 3 * * *", target: {noop: {}}}
"""


def _periods(api) -> dict[str, float]:
    text = api.get("/metrics").get_data(as_text=True)
    return {job: float(value) for job, value in
            re.findall(r'^sundial_job_expected_period_seconds\{project="demo",job="([^"]*)"\} (\S+)$', text, re.M)}


def test_each_jobs_expected_period_is_on_metrics(api):
    """docs/ALERTS.md's rule "not succeeded within two periods" reads it: the interval of
    `every`, a cron schedule's gap between fire times, a relative schedule's interval
    plus its timeout; none for a job that does not run by the clock, or is paused."""
    api.write_config("demo", PERIODS)
    assert api.post("held", ":pause").status_code == 200
    api.until(1)
    text = api.get("/metrics").get_data(as_text=True)
    assert "# TYPE sundial_job_expected_period_seconds gauge" in text
    assert _periods(api) == {"daily": 86400, "hourly": 3600, "beat": 10, "relative": 420,
                             "weekdays": 3 * 86400}  # a Monday after 09:00: the weekend's gap is still one of the two
    assert api.post("held", ":resume").status_code == 200
    assert _periods(api)["held"] == 86400


def test_a_weekday_jobs_period_is_the_weekends_gap_from_fridays_run_to_tuesdays(api):
    """So that the time since its last success stays under two periods over a weekend."""
    api.write_config("demo", "jobs:\n  - {id: weekdays, schedule: \"0 9 * * MON-FRI\", target: {noop: {}}}\n")
    seen = {}
    for day, name in enumerate(("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun", "Mon", "Tue")):
        api.until(day * 86400 + 1)  # 10:00:01 on each day from Monday 2026-01-05
        seen[name if day < 7 else f"next {name}"] = _periods(api)["weekdays"] / 3600
    assert seen == {"Mon": 72, "Tue": 24, "Wed": 24, "Thu": 24, "Fri": 72, "Sat": 72, "Sun": 72,
                    "next Mon": 72, "next Tue": 24}
