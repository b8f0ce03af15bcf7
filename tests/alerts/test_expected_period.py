"""`sundial_job_expected_period_seconds`, which docs/ALERTS.md's SundialJobNotSucceeding
stands on, from a real server's /metrics: a daily, an hourly and an every-10s job, a
relative schedule, and the jobs that have none (triggered, paused)."""

from __future__ import annotations

import re

import requests

from tests.e2e.support import Server

CONFIG = """
jobs:
  - {id: daily, schedule: "0 3 * * *", target: {noop: {}}}
  - {id: hourly, schedule: "0 * * * *", target: {noop: {}}}
  - {id: beat, schedule: every 10s, target: {noop: {}}}
  - {id: relative, schedule: with 1h interval, timeout: 5m, target: {noop: {}}}
  - {id: by-hand, schedule: triggered, target: {noop: {}}}
  - {id: held, schedule: "0 3 * * *", target: {noop: {}}}
"""
GAUGE = re.compile(r'^sundial_job_expected_period_seconds\{project="ops",job="([^"]*)"\} (\S+)$', re.M)


def test_metrics_shows_each_jobs_expected_period(tmp_path):
    configs = tmp_path / "configs"
    configs.mkdir()
    (configs / "ops.yaml").write_text(CONFIG)
    server = Server(configs, tmp_path / "s.db", tmp_path / "server.log").start()
    try:
        assert server.call("POST", "/api/v1/projects/ops/jobs/held:pause")[0] == 200
        text = requests.get(f"{server.url}/metrics", timeout=10).text
    finally:
        server.stop()
    assert "# TYPE sundial_job_expected_period_seconds gauge" in text
    assert {job: float(value) for job, value in GAUGE.findall(text)} == {
        "daily": 86400, "hourly": 3600, "beat": 10, "relative": 3600 + 300}
