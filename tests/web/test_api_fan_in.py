"""Fan-in through the API and the UI: a project file's fan-in job shows `after` and its
window, a PUT with `after` is refused (only a file import tells the upstream jobs), and a
SKIPPED/upstream invocation's page says what the reason means and names who failed."""

from __future__ import annotations

from engine.ports import DeliveryResult
from tests.web.conftest import error_of, noop_job

FAN_IN = """\
jobs:
  - {id: extract-a, schedule: every 1m, target: {noop: {}}}
  - {id: extract-b, schedule: every 1m, target: {noop: {}}}
  - id: report
    after: [extract-a, extract-b]
    after_window: 10m
    target: {noop: {}}
"""


def test_a_fan_in_job_shows_after_and_runs_for_the_scheduled_time(api):
    api.write_config("demo", FAN_IN)
    job = api.job("report")
    assert (job["schedule"], job["after"], job["after_window"]) == ("triggered", ["extract-a", "extract-b"], "10m")
    api.until(65)
    assert [(h["status"], h["trigger"], h["scheduled_time"]) for h in api.history("report")] == [
        ("SUCCEEDED", "after", "2026-01-05T10:01:00.000Z")]


def test_a_put_with_after_is_refused(api):
    api.write_config("demo", FAN_IN)
    response = api.put("mine", noop_job(after=["extract-a"]))
    assert error_of(response) == (400, "INVALID_ARGUMENT")
    assert "fan-in job (after) is defined in its project file" in response.get_json()["error"]["message"]


def test_the_invocation_page_explains_a_skip_for_upstream(api):
    api.write_config("demo", FAN_IN)
    api.target.respond = lambda request: DeliveryResult("failed" if request.job_id == "extract-b" else "succeeded")
    api.until(65)
    skipped = api.history("report")
    assert [(h["status"], h["reason"]) for h in skipped] == [("SKIPPED", "upstream")]
    page = api.get(f"/p/demo/report/{skipped[0]['id']}").get_data(as_text=True)
    assert "an upstream job of this fan-in job (after) did not succeed" in page
    assert "upstream job extract-b ended FAILED" in page


def test_the_jobs_page_says_when_a_fan_in_job_runs(api):
    api.write_config("demo", FAN_IN)
    page = api.get("/p/demo").get_data(as_text=True)
    assert "once extract-a, extract-b all succeeded for the same scheduled time" in page
