"""Every example config validates, and the examples show what the brief promises."""

from pathlib import Path

import pytest

from config.loader import load_project_file
from tests.config.test_cli_validate import run

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "configs"
FILES = sorted(EXAMPLES.glob("*.yaml"))


def test_there_are_examples():
    assert {path.stem for path in FILES} >= {"bridge", "demo", "mycoach"}


@pytest.mark.parametrize("path", FILES, ids=[path.name for path in FILES])
def test_example_loads_without_errors(path):
    config = load_project_file(path)
    assert config.job_errors == ()
    assert config.jobs


def test_the_cli_accepts_the_examples_directory():
    result = run(EXAMPLES)
    assert (result.returncode, result.stdout) == (0, "")


def test_demo_posts_to_its_own_server_every_ten_seconds():
    heartbeat = load_project_file(EXAMPLES / "demo.yaml").job("heartbeat")
    assert heartbeat.policy.schedule_text == "*/10 * * * * ?"
    assert not heartbeat.disabled
    # The server's own host:port, whatever `serve --port` says (tests/e2e/test_signals.py).
    assert heartbeat.definition.target["http"]["url"] == "http://${serviceHost}/demo/echo"


def test_bridge_templates():
    bridge = load_project_file(EXAMPLES / "bridge.yaml")
    exporter = bridge.job("exporter-hourly").definition.target["http"]
    assert exporter["body"] == ('{"endDateTime":"${startOfHour}","useLastExportTime":true,'
                                '"tag":"[scheduler=Bridge-EX-Scheduler,'
                                'endDateTime=${startOfHour}]"}')
    reporter = bridge.job("reporter-daily")
    assert reporter.policy.schedule_text == "0 0 3 * * ?"
    assert reporter.policy.timezone == "America/Los_Angeles"
    assert "${startOfPreviousDay}" in reporter.definition.target["http"]["body"]


def test_mycoach_sends_one_off_notifications_in_the_future():
    invitations = load_project_file(EXAMPLES / "mycoach.yaml").job("training-invitations")
    assert invitations.definition.at[0] == "2027-01-04T08:00:00Z"
