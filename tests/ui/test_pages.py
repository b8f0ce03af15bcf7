"""The UI's pages (docs/REFERENCE.md section 7) through Flask's test client: what an on-call
engineer must be able to read — is the job healthy, when does it run next, why
didn't it run."""

from __future__ import annotations

import re

from markupsafe import escape

from engine.ports import DeliveryResult
from web import ui as ui_module

PROJECT = """\
defaults: {timezone: America/Los_Angeles}
jobs:
  - id: nightly
    schedule: "0 3 * * *"
    target: {noop: {}}
  - id: from-config
    schedule: every 1m
    target: {noop: {}}
  - id: on-demand
    schedule: triggered
    target: {http: {url: "http://127.0.0.1:9/run?at=${scheduledTime}", headers: {Authorization: Bearer s3cret}}}
  - id: broken
    schedule: "not a schedule"
    target: {noop: {}}
"""


def text(html: str) -> str:
    """The page's text with tags dropped and spaces collapsed, for readable asserts."""
    return " ".join(re.sub(r"<[^>]+>", " ", html).split())


def test_projects_list_projects_with_job_counts(ui):
    ui.write_config("other", "jobs: []\n")
    page = text(ui.page("/"))
    assert "demo 1 ok" in page and "other 0 ok" in page


def test_the_jobs_list_shows_schedule_in_words_state_next_run_and_last_result(ui):
    ui.write_config("demo", PROJECT)
    ui.answer("succeeded", "failed")
    ui.until(150)
    page = text(ui.page("/p/demo"))
    assert "4 jobs" not in page and "3 jobs" in page  # the broken entry is skipped
    assert "0 3 * * * at 03:00 every day, America/Los_Angeles SCHEDULED" in page
    assert "every 1m every minute SCHEDULED in 30s FAILED" in page
    assert "triggered only when triggered" in page and "never run" in page
    strip = re.search(r'id="job-from-config".*?</tr>', ui.page("/p/demo"), re.S).group(0)
    assert strip.count('class="tick tick-') == 2 and strip.index("tick-succeeded") < strip.index("tick-failed")


def test_config_errors_show_on_the_project_page(ui):
    ui.write_config("demo", PROJECT)
    page = text(ui.page("/p/demo"))
    assert "1 job entry was skipped" in page and "broken" in page and "not a schedule" in page
    ui.write_config("demo", "jobs: [\n")
    page = text(ui.page("/p/demo"))
    assert "The config file has an error" in page and "keep their last good definitions" in page
    assert "file error" in text(ui.page("/"))


def test_the_jobs_list_pages_and_finds_jobs_by_prefix(ui, monkeypatch):
    monkeypatch.setattr(ui_module, "JOBS_PAGE_SIZE", 2)
    ui.write_config("demo", PROJECT)
    first = ui.page("/p/demo")
    assert "from-config" in first and "nightly" in first and "on-demand" not in first
    token = re.search(r'rel="next" href="[^"]*page_token=([^"&]+)', first).group(1)
    second = ui.page(f"/p/demo?page_token={token}")
    assert "on-demand" in second and "nightly" not in second and 'rel="next"' not in second
    found = ui.page("/p/demo?q=on-")
    assert "on-demand" in found and "nightly" not in found


def test_the_job_page_shows_definition_policies_and_next_five_fire_times(ui):
    ui.write_config("demo", PROJECT)
    page = text(ui.page("/p/demo/nightly"))
    assert "at 03:00 every day, America/Los_Angeles" in page
    assert "config file demo.yaml" in page and "Revision" in page
    assert "overlap skip" in page and "catchup policy: latest, window: 1h" in page
    assert "Next 5 fire times" in page
    assert page.count("03:00:00 PST (-0800)") == 5  # in the job's zone, day after day
    assert "2026-01-05 11:00:00 UTC" in page  # 03:00 PST, the first one after 10:00 UTC
    assert "timezone: America/Los_Angeles" in page  # the whole definition, as YAML


def test_history_filters_by_status_and_pages(ui, monkeypatch):
    monkeypatch.setattr(ui_module, "HISTORY_PAGE_SIZE", 2)
    ui.answer("failed", "failed", "succeeded", "failed", "succeeded")
    ui.until(330)
    everything = ui.page("/p/demo/from-config")
    assert everything.count("status-succeeded") == 1 and everything.count("status-failed") == 1
    failed = ui.page("/p/demo/from-config?status=failed")
    assert failed.count("status-failed") == 2 and "status-succeeded" not in failed
    link = re.search(r'rel="next" href="([^"]*)"', failed).group(1)
    assert "status=failed" in link  # the next page keeps the filter
    token = re.search(r"page_token=([^&#]+)", link).group(1)
    older = ui.page(f"/p/demo/from-config?status=failed&page_token={token}")
    assert older.count("status-failed") == 1 and 'rel="next"' not in older
    assert "no status filter" in ui.page("/p/demo/from-config?status=bogus", 400)


def test_skipped_occurrences_show_with_their_reason(ui):
    ui.press("from-config", "pause", reason="db migration")
    ui.until(190)
    ui.press("from-config", "resume")
    ui.until(250)
    page = text(ui.page("/p/demo/from-config?status=skipped"))
    assert "SKIPPED paused" in page
    invocation = re.search(r'href="/p/demo/from-config/([^"]+)"', ui.page("/p/demo/from-config?status=skipped"))
    shown = text(ui.page(f"/p/demo/from-config/{invocation.group(1)}"))
    assert "Reason: paused" in shown and "skipped: paused" in shown and "the occurrence was skipped" in shown


def test_the_invocation_page_shows_attempts_answers_request_and_timeline(ui):
    ui.write_config("demo", PROJECT)
    ui.target.answers += [DeliveryResult("failed", "http 500", detail="HTTP 500 Internal Server Error\noops")]
    invocation = ui.post("on-demand", ":trigger").get_json()["id"]
    ui.until(5)
    page = text(ui.page(f"/p/demo/on-demand/{invocation}"))
    assert "Invocation FAILED" in page and "Reason: http 500" in page
    assert "1 2026-01-05T10:00:00.000Z failed" in page and "HTTP 500 Internal Server Error oops" in page
    assert "POST http://127.0.0.1:9/run?at=2026-01-05T10:00:00.000Z" in page
    assert "Authorization: •••" in page and "s3cret" not in page  # credentials stay hidden
    assert f"X-Sundial-Invocation: {invocation}" in page
    assert "created trigger=manual" in page and "finished: FAILED (http 500)" in page


def test_everything_shown_is_html_escaped(ui):
    ui.press("from-config", "pause", reason="<script>alert(1)</script>")
    html = ui.page("/p/demo/from-config")
    assert "<script>alert(1)</script>" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "<script>" not in ui.page("/p/demo")


def test_missing_things_are_html_404_pages(ui):
    for path in ("/p/nope", "/p/demo/nope", "/p/demo/from-config/e000"):
        response = ui.client.get(path)
        assert response.status_code == 404 and response.mimetype == "text/html"
        assert "not found" in response.data.decode()


def test_the_request_sent_hides_secret_backed_and_credential_headers(ui, tmp_path):
    from engine.secrets import LocalSecrets

    (tmp_path / "secrets" / "demo").mkdir(parents=True)
    (tmp_path / "secrets" / "demo" / "vendor-key").write_text("vk-51f0")
    ui.engine.deliveries.secrets = LocalSecrets(str(tmp_path / "secrets"))
    ui.put("vendor", {"schedule": "triggered", "target": {"http": {
        "url": "http://127.0.0.1:9/run", "headers": {
            "X-Vendor": {"secret": "vendor-key"}, "Authorization": "Basic abc", "X-Trace": "trace-hidden",
            "Content-Language": "t-1"}}}})
    invocation = ui.post("vendor", ":trigger").get_json()["id"]
    ui.until(1)
    assert ui.delivered("vendor")[0].target["http"]["headers"]["X-Vendor"] == "vk-51f0"
    page = ui.page(f"/p/demo/vendor/{invocation}")
    assert "vk-51f0" not in page and "Basic abc" not in page and "trace-hidden" not in page and "t-1" in page
    assert page.count("•••") >= 3


def test_a_job_whose_entry_breaks_is_marked_on_the_list_its_page_and_the_front_page(ui):
    ui.write_config("demo", PROJECT)
    ui.write_config("demo", PROJECT.replace('schedule: every 1m', 'schedule: "every now and then"'))
    error = ui.store.get_job("demo", "from-config").config_error
    assert "job 'from-config': schedule:" in error
    row = re.search(r'id="job-from-config".*?</tr>', ui.page("/p/demo"), re.S).group(0)
    assert "⚠ config error" in row and f'title="{escape(error)}"' in row
    assert "⚠ config error" not in re.search(r'id="job-nightly".*?</tr>', ui.page("/p/demo"), re.S).group(0)
    page = text(ui.page("/p/demo/from-config"))
    assert "Its entry in the config file has an error" in page and text(escape(error)) in page
    front = ui.page("/")
    # One line, the job's. Its detail is shortened to 160 characters on the page, and it begins
    # with the file's path (a temporary directory, as long as it happens to be): count the
    # whole detail, in each line's title.
    details = re.findall(r'class="plain bad" title="([^"]*)"', front)
    assert sum("every now and then" in detail for detail in details) == 1
    assert "demo/from-config config" in text(front)
    ui.write_config("demo", PROJECT)
    assert "⚠ config error" not in re.search(r'id="job-from-config".*?</tr>', ui.page("/p/demo"), re.S).group(0)
