"""What operators watch, end to end: the log lines Cloud Logging reads and the per-job
series of /metrics, from one real server.

Project `ops`: `ok` succeeds once, `bad` fails twice, `idle` is paused; all three are
triggered by hand, so nothing fires on its own while the test looks. A broken project
file comes in through the config import's cron handler, called with a trace header.
"""

from __future__ import annotations

import json
import re
import time
from datetime import datetime, timezone

import pytest
import requests

from tests.e2e.support import ROOT, Receiver, Server, wait_until

SECRET = "signals-secret"
TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CONFIG = """
jobs:
  - id: ok
    schedule: "0 0 1 1 *"
    target: {{http: {{url: "{url}/ok"}}}}
  - id: bad
    schedule: triggered
    target: {{http: {{url: "{url}/bad"}}}}
  - id: idle
    schedule: "*/5 * * * *"
    target: {{http: {{url: "{url}/ok"}}}}
"""
SAMPLE = re.compile(r'^(\w+)\{project="([^"]*)",job="([^"]*)"\} (\S+)$', re.M)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("signals")
    receiver = Receiver(statuses={"/bad": 500})
    configs = tmp / "configs"
    configs.mkdir()
    (configs / "ops.yaml").write_text(CONFIG.format(url=receiver.url))
    env = {"SUNDIAL_TASK_SECRET": SECRET, "SUNDIAL_IMPORT_PERIOD": "1h", "GOOGLE_CLOUD_PROJECT": "acme"}
    server = Server(configs, tmp / "s.db", tmp / "stdout.log", env=env, stderr_log=tmp / "stderr.log").start()
    jobs = "/api/v1/projects/ops/jobs"
    assert server.call("POST", f"{jobs}/idle:pause", {"reason": "maintenance"})[0] == 200
    assert server.call("POST", f"{jobs}/ok:trigger")[0] == 200
    for count in (1, 2):  # one after the other: the second waits for the first to finish
        assert server.call("POST", f"{jobs}/bad:trigger")[0] == 200
        assert wait_until(lambda: [i["status"] for i in server.invocations("ops", "bad")] == ["FAILED"] * count, 20)
    assert wait_until(lambda: [i["status"] for i in server.invocations("ops", "ok")] == ["SUCCEEDED"], 20)
    # A broken file, imported by the cron handler in a request that carries a trace.
    (configs / "broken.yaml").write_text("jobs: [\n")
    answer = requests.get(f"{server.url}/internal/cron/import-configs", timeout=30, headers={
        "X-Sundial-Task-Secret": SECRET, "X-Cloud-Trace-Context": f"{TRACE}/7;o=1"})
    assert answer.status_code == 200, answer.text
    yield server, tmp
    server.stop()
    receiver.close()


def lines(tmp) -> list[dict]:
    """Every stderr line, each of which must be one JSON object."""
    return [json.loads(line) for line in (tmp / "stderr.log").read_text().splitlines()]


def test_every_stderr_line_is_json_with_severity_message_and_time(run):
    server, tmp = run
    entries = lines(tmp)
    assert entries
    for entry in entries:
        assert entry["severity"] in ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
        assert isinstance(entry["message"], str) and entry["message"]
        datetime.fromisoformat(entry["time"].replace("Z", "+00:00"))  # RFC 3339
    assert "serving on" in (tmp / "stdout.log").read_text()  # the banner is for people, on stdout


def test_a_failed_delivery_is_a_warning_and_a_failed_invocation_an_error(run):
    _, tmp = run
    delivered = [e for e in lines(tmp) if e["message"] == "delivered"]
    assert {(e["job"], e["outcome"], e["severity"]) for e in delivered} == {
        ("ops/ok", "succeeded", "INFO"), ("ops/bad", "failed", "WARNING")}
    failed = [e for e in lines(tmp) if e["message"] == "invocation failed"]
    assert [(e["job"], e["severity"], e["consecutive_failures"]) for e in failed] == [
        ("ops/bad", "ERROR", 1), ("ops/bad", "ERROR", 2)]


def test_a_broken_config_file_is_an_error_tied_to_the_request_trace(run):
    _, tmp = run
    [error] = [e for e in lines(tmp) if e["message"] == "config error"]
    assert (error["severity"], error["project"]) == ("ERROR", "broken")
    assert error["logging.googleapis.com/trace"] == f"projects/acme/traces/{TRACE}"
    assert error["logging.googleapis.com/spanId"] == f"{7:016x}"
    # Lines of work done outside any request (deliveries) carry no trace.
    assert not any("logging.googleapis.com/trace" in e for e in lines(tmp) if e["message"] == "delivered")


def test_per_job_series_match_what_happened(run):
    server, _ = run
    text = requests.get(f"{server.url}/metrics", timeout=10).text
    series = {(name, job): float(value) for name, project, job, value in SAMPLE.findall(text) if project == "ops"}
    ok_run = server.invocations("ops", "ok")[0]
    finished = datetime.fromisoformat(ok_run["finished_time"].replace("Z", "+00:00")).timestamp()
    year = datetime.now(timezone.utc).year
    new_year = datetime(year + 1, 1, 1, tzinfo=timezone.utc).timestamp()
    # The longer of the two gaps around now between its fire times (docs/ALERTS.md): a year.
    this_year, last_year = (datetime(y, 1, 1, tzinfo=timezone.utc).timestamp() for y in (year, year - 1))
    period = max(new_year - this_year, this_year - last_year)
    assert series == {
        ("sundial_job_last_success_timestamp_seconds", "ok"): pytest.approx(finished, abs=0.002),
        ("sundial_job_consecutive_failures", "ok"): 0,
        ("sundial_job_consecutive_failures", "bad"): 2,
        ("sundial_job_consecutive_failures", "idle"): 0,
        ("sundial_job_next_run_timestamp_seconds", "ok"): new_year,
        ("sundial_job_paused", "ok"): 0,
        ("sundial_job_paused", "bad"): 0,
        ("sundial_job_paused", "idle"): 1,
        ("sundial_job_expected_period_seconds", "ok"): period,  # none for `bad` (triggered), `idle` (paused)
    }
    assert time.time() < new_year


def test_config_errors_per_project(run):
    server, _ = run
    text = requests.get(f"{server.url}/metrics", timeout=10).text
    errors = dict(re.findall(r'^sundial_project_config_errors\{project="([^"]*)"\} (\S+)$', text, re.M))
    assert errors == {"ops": "0", "broken": "1"}


ALERTS = ROOT / "docs" / "ALERTS.md"


def test_every_series_the_alert_rules_use_is_on_metrics(run):
    server, _ = run
    text = requests.get(f"{server.url}/metrics", timeout=10).text
    shown = set(re.findall(r"^(sundial_\w+)[{ ]", text, re.M))
    shown |= {name.removesuffix("_bucket") for name in shown}  # a histogram by its family's name
    # A name not glued to a prefix (log-based metrics read `...:user_sundial_...`).
    used = set(re.findall(r"(?<![\w:])(sundial_\w+)", ALERTS.read_text()))
    assert {"sundial_job_consecutive_failures", "sundial_lateness_seconds_bucket",
            "sundial_watchdog_repairs_total", "sundial_project_config_errors"} <= used
    assert used - shown == set()


def test_every_log_message_the_alerts_filter_on_is_logged_by_sundial():
    doc = ALERTS.read_text()
    messages = set(re.findall(r'jsonPayload\.message="([^"]+)"', doc))
    messages |= {m for group in re.findall(r"jsonPayload\.message=\(([^)]*)\)", doc)
                 for m in re.findall(r'"([^"]+)"', group)}
    source = "\n".join(path.read_text() for folder in ("engine", "app")
                       for path in (ROOT / folder).rglob("*.py"))
    assert len(messages) >= 6
    assert {m for m in messages if f'log_event(log, "{m}"' not in source} == set()


def test_the_prometheus_rules_are_a_rule_file():
    import yaml

    blocks = re.findall(r"```yaml\n(.*?)```", ALERTS.read_text(), re.S)
    [rules] = [yaml.safe_load(block) for block in blocks if block.startswith("groups:")]
    alerts = [rule for group in rules["groups"] for rule in group["rules"]]
    assert len(alerts) >= 5 and all(set(rule) >= {"alert", "expr"} for rule in alerts)


def test_the_demo_heartbeat_follows_the_port_serve_listens_on(tmp_path):
    configs = tmp_path / "configs"
    configs.mkdir()
    (configs / "demo.yaml").write_text((ROOT / "examples" / "configs" / "demo.yaml").read_text())
    server = Server(configs, tmp_path / "s.db", tmp_path / "server.log").start()  # a free port, never 8080
    try:
        assert server.port != 8080
        assert server.call("POST", "/api/v1/projects/demo/jobs/heartbeat:trigger")[0] == 200
        done = wait_until(lambda: [i for i in server.invocations("demo", "heartbeat")
                                   if i["status"] not in ("STARTING", "RUNNING")], 20)
        # The trigger's invocation, and maybe a beat of its schedule (every 10 s) as well.
        assert done and {i["status"] for i in done} == {"SUCCEEDED"}, (tmp_path / "server.log").read_text()[-2000:]
    finally:
        server.stop()
