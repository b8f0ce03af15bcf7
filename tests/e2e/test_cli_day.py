"""The operator's whole day on the command line, against a live `serve`: projects list,
honest last and next runs, --output json, label and state filters, apply and delete,
bulk pause and resume, and follow.

One server for the module (no API tokens: loopback, every caller an owner, audited as
`local`), with three projects: `day` (jobs from its config file, two of them labelled),
`live` (a job every 20 s, so that its next occurrence is often committed ahead of its
time) and `broken` (a file that does not parse). Commands run in-process through cli.main.
"""

from __future__ import annotations

import json
import re
import time
from datetime import datetime, timedelta, timezone

import pytest

import cli
from tests.e2e.support import Server, wait_until

DAY = """\
jobs:
  - id: export-a
    schedule: every 1h
    labels: {team: data, tier: "1"}
    target: {noop: {}}
  - id: export-b
    schedule: every 1h
    labels: {team: data, tier: "2"}
    target: {noop: {}}
  - id: web-check
    schedule: every 1h
    labels: {team: web}
    target: {noop: {}}
  - id: on-demand
    schedule: triggered
    target: {noop: {}}
"""
LIVE = """\
jobs:
  - id: every-12s
    schedule: every 12s
    target: {noop: {}}
  - id: beat
    schedule: every 1s
    target: {noop: {}}
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("cli-day")
    configs = tmp / "configs"
    configs.mkdir()
    (configs / "day.yaml").write_text(DAY)
    (configs / "live.yaml").write_text(LIVE)
    (configs / "broken.yaml").write_text("jobs: [\n")
    running = Server(configs, tmp / "sundial.db", tmp / "server.log").start()
    assert wait_until(lambda: running.call("GET", "/api/v1/projects/live/jobs")[0] == 200, timeout=10)
    yield running
    running.stop()


def run(capsys, server: Server, *argv: str) -> tuple[int, str, str]:
    """cli.main in this process: (exit status, stdout, stderr)."""
    status = cli.main([*argv, "--server", server.url])
    out, err = capsys.readouterr()
    return status, out, err


def table(out: str) -> dict[str, list[str]]:
    """A table's rows by their first cell (the columns are two or more spaces apart)."""
    lines = out.strip().splitlines()
    return {cells[0]: cells for cells in (re.split(r"\s{2,}", line.strip()) for line in lines[1:])}


def _instant(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def test_last_run_is_never_an_occurrence_still_to_come(server, capsys):
    """Issue 37: `jobs list` printed LAST RESULT STARTING with a LAST RUN in the future: the
    occurrence committed up to 10 s ahead of its time (its request held until then)."""
    def staged():
        job = server.get("/api/v1/projects/live/jobs/every-12s")
        last = job.get("last_invocation") or {}
        ahead = last.get("scheduled_time") and _instant(last["scheduled_time"]) - datetime.now(timezone.utc)
        return (last.get("status") == "STARTING" and last.get("started_time") is None
                and ahead and ahead > timedelta(seconds=2))

    assert wait_until(staged, timeout=45, interval=0.2), "the job's occurrence was never seen staged"
    status, out, _ = run(capsys, server, "jobs", "list", "live")
    now = datetime.now(timezone.utc)
    assert status == 0
    row = table(out)["every-12s"]
    assert row[4] != "STARTING"  # LAST RESULT: the one to come has no result
    assert row[5] == "-" or _instant(row[5]) <= now, out  # LAST RUN
    assert _instant(row[3]) > now  # NEXT RUN: the one to come


def test_resume_prints_the_next_fire_time_not_the_instant_of_the_resume(server, capsys):
    assert run(capsys, server, "jobs", "pause", "day", "export-a")[0] == 0
    status, out, _ = run(capsys, server, "jobs", "resume", "day", "export-a")
    assert status == 0
    next_run = re.search(r"next run (\S+),", out).group(1)
    top_of_hour = (datetime.now(timezone.utc) + timedelta(hours=1)).replace(minute=0, second=0, microsecond=0)
    assert _instant(next_run) == top_of_hour, out


def test_projects_list_shows_each_project_its_jobs_and_config_errors(server, capsys):
    status, out, _ = run(capsys, server, "projects", "list")
    assert status == 0
    rows = table(out)
    assert rows["day"][1:] == ["4", "ok"] and rows["live"][1:] == ["2", "ok"]
    assert rows["broken"][2].startswith("error: ")
    document = json.loads(run(capsys, server, "projects", "list", "--output", "json")[1])
    assert sorted(project["id"] for project in document["projects"]) == ["broken", "day", "live"]


@pytest.mark.parametrize("argv, key", [
    (["projects", "list"], "projects"),
    (["jobs", "list", "day"], "jobs"),
    (["jobs", "get", "day", "export-b"], "id"),
    (["jobs", "pause", "day", "--label", "tier=2"], "results"),
    (["jobs", "resume", "day", "--label", "tier=2"], "results"),
    (["invocations", "list", "day", "export-b"], "invocations"),
])
@pytest.mark.parametrize("flag", [["--output", "json"], ["-o", "json"], ["--json"]])
def test_every_command_prints_json_with_output_json(server, capsys, argv, key, flag):
    status, out, err = run(capsys, server, *argv, *flag)
    assert (status, err) == (0, "")
    assert key in json.loads(out)


def test_label_and_state_filters(server, capsys):
    rows = table(run(capsys, server, "jobs", "list", "day", "--label", "team=data")[1])
    assert sorted(rows) == ["export-a", "export-b"]
    rows = table(run(capsys, server, "jobs", "list", "day", "--label", "team", "--label", "tier=2")[1])
    assert sorted(rows) == ["export-b"]
    assert run(capsys, server, "jobs", "pause", "day", "web-check")[0] == 0
    try:
        rows = table(run(capsys, server, "jobs", "list", "day", "--state", "paused")[1])
        assert sorted(rows) == ["web-check"]
        assert run(capsys, server, "jobs", "list", "day", "--state", "paused", "--label", "team=data")[1] == \
            "no PAUSED team=data jobs in day\n"
    finally:
        run(capsys, server, "jobs", "resume", "day", "web-check")


def test_bulk_pause_and_resume_by_label_with_a_reason_each_job_audited(server, capsys):
    status, out, _ = run(capsys, server, "jobs", "pause", "day", "--label", "team=data", "--reason", "INC-9")
    assert status == 0
    assert out.splitlines() == ["paused 2 of 2 jobs with team=data in day: INC-9",
                                "  export-a: paused", "  export-b: paused"]
    jobs = json.loads(run(capsys, server, "jobs", "list", "day", "-o", "json")[1])["jobs"]
    assert {job["id"]: job["pause_reason"] for job in jobs if job["paused"]} == {"export-a": "INC-9",
                                                                                 "export-b": "INC-9"}
    status, out, _ = run(capsys, server, "jobs", "resume", "day", "--all", "--reason", "INC-9 over")
    assert status == 0 and out.splitlines()[0] == "resumed 2 of 4 jobs in day: INC-9 over"
    entries = server.get("/api/v1/projects/day/audit?page_size=20")["entries"]
    pauses = sorted(e["job"] for e in entries if e["action"] == "pause" and e["detail"].get("reason") == "INC-9")
    assert pauses == ["export-a", "export-b"]
    assert all(e["actor"] == "local" for e in entries)


@pytest.mark.parametrize("argv, says", [
    (["jobs", "pause", "day"], "name a JOB, or select jobs with --label KEY=VALUE or --all"),
    (["jobs", "pause", "day", "export-a", "--all"], "JOB (export-a) and --all: give one of them"),
    (["jobs", "resume", "day", "--all", "--label", "team=data"], "--all and --label: give one of them"),
    (["jobs", "list", "day", "--label", "Team=data"], "'Team=data': write KEY=VALUE or KEY"),
    (["jobs", "list", "day", "--state", "sleeping"], "invalid choice: 'SLEEPING'"),
])
def test_a_selection_that_is_not_clear_is_a_usage_error(server, capsys, argv, says):
    status = _exit_status([*argv, "--server", server.url])
    err = capsys.readouterr().err
    assert status == 2 and says in err and err.count("\n") == 1, err


def _exit_status(argv: list[str]) -> int:
    """cli.main's status, or argparse's (which exits for the arguments it refuses)."""
    try:
        return cli.main(argv)
    except SystemExit as exited:
        return int(exited.code or 0)


def test_a_bulk_action_with_a_refusing_job_says_so_and_exits_1(server, capsys, tmp_path):
    spec = tmp_path / "off.yaml"
    spec.write_text("jobs:\n  - id: switched-off\n    schedule: every 1h\n    disabled: true\n"
                    "    labels: {team: data}\n    target: {noop: {}}\n")
    assert run(capsys, server, "jobs", "apply", "day", "-f", str(spec))[0] == 0
    try:
        status, out, _ = run(capsys, server, "jobs", "pause", "day", "--label", "team=data")
        assert status == 1
        assert "  switched-off: failed (FAILED_PRECONDITION: job day/switched-off is disabled)" in out.splitlines()
    finally:
        run(capsys, server, "jobs", "resume", "day", "--label", "team=data")
        run(capsys, server, "jobs", "delete", "day", "switched-off")


def test_apply_creates_then_replaces_and_reports_each_refusal(server, capsys, tmp_path):
    spec = tmp_path / "jobs.yaml"
    spec.write_text("jobs:\n  - id: reminder-1\n    schedule: triggered\n    target: {noop: {}}\n"
                    "  - id: export-a\n    schedule: every 1h\n    target: {noop: {}}\n"
                    "  - id: reminder-2\n    schedule: every 5 s\n    target: {noop: {}}\n")
    status, out, _ = run(capsys, server, "jobs", "apply", "day", "-f", str(spec))
    assert status == 1
    lines = out.splitlines()
    assert lines[0] == "day/reminder-1: created"
    assert lines[1].startswith("day/export-a: failed: ALREADY_EXISTS: ")  # its config file defines it
    assert lines[2].startswith("day/reminder-2: failed: INVALID_ARGUMENT: ") and "every 5 s" in lines[2]
    as_json = tmp_path / "one.json"
    as_json.write_text(json.dumps({"id": "reminder-1", "schedule": "every 1h", "target": {"noop": {}}}))
    status, out, _ = run(capsys, server, "jobs", "apply", "day", "-f", str(as_json), "-o", "json")
    assert (status, json.loads(out)) == (0, {"results": [{"id": "reminder-1", "status": "replaced"}]})
    assert server.get("/api/v1/projects/day/jobs/reminder-1")["schedule"] == "every 1h"
    status, out, _ = run(capsys, server, "jobs", "delete", "day", "reminder-1", "never-was")
    assert status == 1
    assert out.splitlines() == ["day/reminder-1: deleted",
                                "day/never-was: failed: NOT_FOUND: job day/never-was not found"]
    assert run(capsys, server, "jobs", "delete", "day", "never-was", "--missing-ok")[0] == 0
    assert server.call("GET", "/api/v1/projects/day/jobs/reminder-1")[0] == 404


@pytest.mark.parametrize("text, says", [
    ("jobs: [\n", "bad.yaml:2: "),
    ("acl: {owners: [user:a@example.com]}\njobs: []\n", "acl: project-level fields come from"),
    ("jobs:\n  - schedule: every 1h\n", "entry 1 is not a job entry with an id"),
    ("jobs: []\n", "holds no job entries"),
    ("jobs:\n  - {id: a, target: {noop: {}}}\n  - {id: a, target: {noop: {}}}\n", "job a is given twice"),
])
def test_apply_refuses_a_file_it_cannot_use_and_sends_nothing(server, capsys, tmp_path, text, says):
    spec = tmp_path / "bad.yaml"
    spec.write_text(text)
    before = server.get("/api/v1/projects/day/audit?page_size=1")["entries"]
    status = _exit_status(["jobs", "apply", "day", "-f", str(spec), "--server", server.url])
    err = capsys.readouterr().err
    assert status == 2 and says in err and err.count("\n") == 1, err
    assert server.get("/api/v1/projects/day/audit?page_size=1")["entries"] == before


def test_follow_prints_new_invocations_as_they_happen_not_the_history(server, capsys):
    started = datetime.now(timezone.utc)
    status, out, _ = run(capsys, server, "invocations", "follow", "live", "beat", "--count", "3",
                         "--duration", "30s", "--interval", "500ms")
    assert status == 0
    lines = out.splitlines()
    assert len(lines) == 3, out
    for line in lines:
        when, job, _, outcome = line.split()[:4]
        assert job == "live/beat" and outcome in ("RUNNING", "SUCCEEDED")
        assert _instant(when) >= started - timedelta(seconds=1)  # news, not history


def test_follow_a_project_as_json_lines_until_its_duration(server, capsys):
    began = time.monotonic()
    status, out, _ = run(capsys, server, "invocations", "follow", "live", "--duration", "3s",
                         "--interval", "500ms", "--output", "json")
    assert status == 0 and 2.5 < time.monotonic() - began < 15
    rows = [json.loads(line) for line in out.splitlines()]
    assert rows and {row["job"] for row in rows} <= {"beat", "every-12s"}
    assert len({(row["id"], row["status"]) for row in rows}) == len(rows)  # each change once


def test_follow_a_project_prints_what_happens_after_it_started_only(server, capsys):
    """A job idle at the start has its history left unread; its next invocation is news."""
    import threading

    before = server.call("POST", "/api/v1/projects/day/jobs/on-demand:trigger")[1]["id"]
    assert wait_until(lambda: server.get(f"/api/v1/projects/day/jobs/on-demand/invocations/{before}")["status"]
                      == "SUCCEEDED", timeout=10)
    later: list[str] = []
    timer = threading.Timer(2.0, lambda: later.append(
        server.call("POST", "/api/v1/projects/day/jobs/on-demand:trigger")[1]["id"]))
    timer.start()
    try:
        status, out, _ = run(capsys, server, "invocations", "follow", "day", "--duration", "20s",
                             "--interval", "300ms", "--count", "1", "-o", "json")
    finally:
        timer.join()
    rows = [json.loads(line) for line in out.splitlines()]
    assert status == 0 and [(row["id"], row["job"]) for row in rows] == [(later[0], "on-demand")]
