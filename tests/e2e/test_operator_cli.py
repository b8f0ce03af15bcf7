"""The operator's commands (`jobs ...`, `invocations ...`) against a live `serve`.

One server for the module, started with API tokens (so a wrong token is a real 401),
holding one project: a clock-driven job, a triggered one whose target does nothing, an
async one whose target answers 202 and never calls back (so an invocation stays active
until it is aborted), and a few more so that lists span several pages. Most commands
run in-process through cli.main; a few as `python main.py` subprocesses, which also
checks SUNDIAL_SERVER and SUNDIAL_TOKEN.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from datetime import datetime, timedelta, timezone

import pytest

import cli
from cli import operate
from tests.e2e.support import ROOT, Receiver, Server, free_port, wait_until

PROJECT = "ops"
TOKEN = "ops-token-1"
CONFIG = """\
acl:
  owners: [user:ops@example.com]
jobs:
  - id: hourly
    schedule: every 1h
    target: {noop: {}}
  - id: on-demand
    schedule: triggered
    target: {noop: {}}
  - id: slow
    schedule: triggered
    timeout: 10m
    target: {http: {url: "RECEIVER/slow", async: true}}
"""
EXTRA_JOBS = [f"spare-{n}" for n in range(3)]  # five jobs in all: pages of 2 need three requests


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("operator-cli")
    receiver = Receiver(statuses={"/slow": 202})
    configs = tmp / "configs"
    configs.mkdir()
    extra = "".join(f"  - id: {name}\n    schedule: triggered\n    target: {{noop: {{}}}}\n" for name in EXTRA_JOBS)
    (configs / f"{PROJECT}.yaml").write_text(CONFIG.replace("RECEIVER", receiver.url) + extra)
    running = Server(configs, tmp / "sundial.db", tmp / "server.log",
                     env={"SUNDIAL_API_TOKENS": f"{TOKEN}=user:ops@example.com"}).start()
    headers = {"Authorization": f"Bearer {TOKEN}"}
    assert wait_until(lambda: running.call("GET", f"/api/v1/projects/{PROJECT}/jobs", headers=headers)[0] == 200,
                      timeout=10)
    yield running
    running.stop()
    receiver.close()


def run(capsys, server: Server, *argv: str, token: str = TOKEN) -> tuple[int, str, str]:
    """cli.main in this process: (exit status, stdout, stderr)."""
    status = cli.main([*argv, "--server", server.url, "--token", token])
    out, err = capsys.readouterr()
    return status, out, err


def table(out: str) -> dict[str, list[str]]:
    """A table's rows by their first cell (the columns are two or more spaces apart)."""
    lines = out.strip().splitlines()
    return {cells[0]: cells for cells in (re.split(r"\s{2,}", line.strip()) for line in lines[1:])}


def test_jobs_list_shows_every_job_as_a_table_and_as_the_apis_json(server, capsys, monkeypatch):
    monkeypatch.setattr(operate, "PAGE_SIZE", 2)  # three pages: the list must follow page_token
    status, out, err = run(capsys, server, "jobs", "list", PROJECT)
    assert (status, err) == (0, "")
    assert out.splitlines()[0].split() == ["ID", "STATE", "SCHEDULE", "NEXT", "RUN", "LAST", "RESULT", "LAST", "RUN"]
    rows = table(out)
    assert sorted(rows) == sorted(["hourly", "on-demand", "slow", *EXTRA_JOBS])
    assert rows["hourly"][1:3] == ["SCHEDULED", "every 1h"]
    assert rows["hourly"][3].endswith("Z")  # its next run
    status, out, _ = run(capsys, server, "jobs", "list", PROJECT, "--json")
    document = json.loads(out)
    assert [job["id"] for job in document["jobs"]] == sorted(rows)
    assert document["next_page_token"] is None


def test_jobs_list_stops_at_its_limit_and_says_there_is_more(server, capsys, monkeypatch):
    monkeypatch.setattr(operate, "PAGE_SIZE", 2)
    status, out, err = run(capsys, server, "jobs", "list", PROJECT, "--limit", "3")
    assert status == 0
    assert len(table(out)) == 3
    assert "more jobs than --limit 3" in err
    document = json.loads(run(capsys, server, "jobs", "list", PROJECT, "--limit", "3", "--json")[1])
    assert len(document["jobs"]) == 3 and document["next_page_token"]


def test_jobs_get_shows_one_job(server, capsys):
    status, out, _ = run(capsys, server, "jobs", "get", PROJECT, "hourly")
    assert status == 0
    assert f"job:            {PROJECT}/hourly" in out.splitlines()
    assert "schedule:       every 1h" in out.splitlines()
    document = json.loads(run(capsys, server, "jobs", "get", PROJECT, "hourly", "--json")[1])
    assert document["id"] == "hourly" and document["state"] == "SCHEDULED"


def test_pause_then_get_shows_paused_and_resume_schedules_again(server, capsys):
    status, out, _ = run(capsys, server, "jobs", "pause", PROJECT, "hourly", "--reason", "INC-7 target down")
    assert status == 0
    assert out.startswith(f"paused {PROJECT}/hourly: state PAUSED (INC-7 target down)")
    out = run(capsys, server, "jobs", "get", PROJECT, "hourly")[1]
    assert "state:          PAUSED" in out.splitlines()
    assert "pause reason:   INC-7 target down" in out.splitlines()
    assert table(run(capsys, server, "jobs", "list", PROJECT)[1])["hourly"][1] == "PAUSED"
    status, out, _ = run(capsys, server, "jobs", "resume", PROJECT, "hourly", "--json")
    assert status == 0
    assert json.loads(out)["paused"] is False
    assert "state:          PAUSED" not in run(capsys, server, "jobs", "get", PROJECT, "hourly")[1]


def test_trigger_then_invocations_list_and_get_show_it(server, capsys):
    status, out, _ = run(capsys, server, "jobs", "trigger", PROJECT, "on-demand", "--json")
    assert status == 0
    invocation = json.loads(out)
    assert invocation["job"] == "on-demand" and invocation["trigger"] == "manual"

    def finished():
        rows = table(run(capsys, server, "invocations", "list", PROJECT, "on-demand")[1])
        return rows.get(invocation["id"], [None, None])[1] == "SUCCEEDED" and rows

    rows = wait_until(finished, timeout=10)
    assert rows, "the triggered invocation did not succeed"
    assert rows[invocation["id"]][3:5] == ["manual", "1"]  # trigger, attempts
    listed = json.loads(run(capsys, server, "invocations", "list", PROJECT, "on-demand", "--json")[1])
    assert invocation["id"] in [row["id"] for row in listed["invocations"]]
    assert run(capsys, server, "invocations", "list", PROJECT, "on-demand", "--status", "failed")[1].startswith(
        "no FAILED invocations")
    status, out, _ = run(capsys, server, "invocations", "get", PROJECT, "on-demand", invocation["id"])
    assert status == 0
    assert "status:     SUCCEEDED" in out.splitlines() and "log:" in out.splitlines()
    document = json.loads(run(capsys, server, "invocations", "get", PROJECT, "on-demand", invocation["id"],
                              "--json")[1])
    assert document["id"] == invocation["id"] and document["log"]


def test_backfill_runs_each_past_hour_and_trigger_reruns_a_past_time(server, capsys):
    end = datetime.now(timezone.utc).replace(minute=0, second=0, microsecond=0)
    start = end - timedelta(hours=3)
    status, out, _ = run(capsys, server, "jobs", "backfill", PROJECT, "hourly", "--start", _z(start), "--end", _z(end))
    assert status == 0 and out.startswith(f"backfilled {PROJECT}/hourly: 3 invocations, started in order")
    ids = out.split()[-3:]

    def done():
        rows = {row["id"]: row for row in json.loads(run(
            capsys, server, "invocations", "list", PROJECT, "hourly", "--json")[1])["invocations"]}
        return all(rows.get(i, {}).get("status") == "SUCCEEDED" for i in ids) and rows

    rows = wait_until(done, timeout=10)
    assert rows and [rows[i]["trigger"] for i in ids] == ["backfill"] * 3
    assert [rows[i]["scheduled_time"] for i in ids] == [_z(start + timedelta(hours=n)) for n in range(3)]
    status, out, _ = run(capsys, server, "jobs", "trigger", PROJECT, "hourly", "--scheduled-time", _z(start), "--json")
    rerun = json.loads(out)
    assert (status, rerun["scheduled_time"], rerun["trigger"]) == (0, _z(start), "manual")
    status, _, err = run(capsys, server, "jobs", "backfill", PROJECT, "on-demand", "--start", _z(start),
                         "--end", _z(end))
    assert status == 1 and err.startswith("main.py jobs backfill: 400 INVALID_ARGUMENT: ")


def _z(moment: datetime) -> str:
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def test_abort_ends_the_active_invocation(server, capsys):
    invocation = json.loads(run(capsys, server, "jobs", "trigger", PROJECT, "slow", "--json")[1])

    def running():
        got = json.loads(run(capsys, server, "invocations", "get", PROJECT, "slow", invocation["id"], "--json")[1])
        return got["status"] == "RUNNING"

    assert wait_until(running, timeout=10), "the async invocation never started"
    status, out, _ = run(capsys, server, "jobs", "abort", PROJECT, "slow", "--reason", "runaway")
    assert status == 0
    assert out.startswith(f"aborted the active invocations of {PROJECT}/slow:")
    out = run(capsys, server, "invocations", "list", PROJECT, "slow", "--status", "ABORTED")[1]
    assert invocation["id"] in table(out)


def test_an_unknown_job_is_the_apis_404_on_one_line(server, capsys):
    status, out, err = run(capsys, server, "jobs", "get", PROJECT, "no-such-job")
    assert (status, out) == (1, "")
    assert err == f"main.py jobs get: 404 NOT_FOUND: job {PROJECT}/no-such-job not found\n"


def test_a_paused_jobs_trigger_is_the_apis_409(server, capsys):
    assert run(capsys, server, "jobs", "pause", PROJECT, "spare-0")[0] == 0
    status, _, err = run(capsys, server, "jobs", "trigger", PROJECT, "spare-0")
    assert status == 1
    assert err.startswith("main.py jobs trigger: 409 FAILED_PRECONDITION: ") and err.count("\n") == 1


def test_a_wrong_token_is_401_as_a_subprocess_with_the_environments_server(server):
    env = {**os.environ, "SUNDIAL_SERVER": server.url, "SUNDIAL_TOKEN": "not-the-token"}
    done = subprocess.run([sys.executable, "main.py", "jobs", "list", PROJECT], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1, done.stderr
    assert done.stdout == ""
    assert done.stderr.startswith("main.py jobs list: 401 UNAUTHENTICATED: ")
    assert done.stderr.count("\n") == 1


def test_the_environments_token_and_server_work_as_a_subprocess(server):
    env = {**os.environ, "SUNDIAL_SERVER": server.url + "/", "SUNDIAL_TOKEN": TOKEN}
    done = subprocess.run([sys.executable, "main.py", "jobs", "get", PROJECT, "on-demand", "--json"], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["id"] == "on-demand"


def test_an_unreachable_server_is_named_with_exit_status_1(capsys):
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    status = cli.main(["invocations", "list", PROJECT, "hourly", "--server", url])
    out, err = capsys.readouterr()
    assert (status, out) == (1, "")
    assert err.startswith(f"main.py invocations list: cannot reach the Sundial server at {url}: connection refused")


@pytest.mark.parametrize("argv, says", [
    (["jobs"], "required: VERB"),
    (["jobs", "get", PROJECT], "required: JOB"),
    (["jobs", "get", "Not_A_Project", "hourly"], "'Not_A_Project' is not a project id"),
    (["jobs", "get", PROJECT, ".."], "'..' is not a job id"),  # it would change the path
    (["jobs", "list", PROJECT, "--limit", "0"], "--limit: must be 1 or more"),
    (["invocations", "list", PROJECT, "hourly", "--status", "DONE"], "invalid choice: 'DONE'"),
    (["jobs", "list", PROJECT, "--server", "127.0.0.1:8080"], "--server: expected a URL"),
    (["jobs", "backfill", PROJECT, "hourly", "--start", "2026-01-05T10:00", "--end", "2026-01-05T11:00Z"],
     "has no offset"),
    (["jobs", "backfill", PROJECT, "hourly", "--start", "2026-01-05T10:00Z"], "required: --end"),
])
def test_usage_errors_exit_2_without_a_request(argv, says, capsys):
    with pytest.raises(SystemExit) as raised:
        status = cli.main(argv)
        raise SystemExit(status)
    assert raised.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and says in err, err


def test_a_redirect_does_not_carry_the_token_on(capsys):
    """A server that sends the command elsewhere gets the token; the place it sends it to does not."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
    from threading import Thread

    receiver = Receiver()

    class Redirect(BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(302)
            self.send_header("Location", receiver.url + "/elsewhere")
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args):
            pass

    redirector = ThreadingHTTPServer(("127.0.0.1", 0), Redirect)
    Thread(target=redirector.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{redirector.server_address[1]}"
        status = cli.main(["jobs", "get", PROJECT, "hourly", "--server", url, "--token", TOKEN])
    finally:
        redirector.shutdown()
        redirector.server_close()
        receiver.close()
    assert status == 1  # the receiver's "ok" is not JSON
    assert "something other than JSON" in capsys.readouterr().err
    [arrival] = receiver.arrivals
    assert "Authorization" not in arrival.headers


def _main(argv: list[str], stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "main.py", *argv], cwd=ROOT, input=stdin, capture_output=True,
                          text=True, timeout=60, env={k: v for k, v in os.environ.items() if k != "SUNDIAL_TOKEN"})


def test_the_token_comes_from_a_file_or_standard_input_never_the_process_list(server, tmp_path):
    """Finding N5: `--token "$TOKEN"` showed the token to every local user in `ps`."""
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    wrong_file = tmp_path / "wrong"
    wrong_file.write_text("not-the-token\n")
    listing = ["jobs", "list", PROJECT, "--server", server.url]
    for argv, stdin in (([*listing, "--token-file", str(token_file)], None),
                        ([*listing, "--token-file", "-"], TOKEN + "\n"), ([*listing, "--token", "-"], TOKEN)):
        done = _main(argv, stdin)
        assert done.returncode == 0 and "on-demand" in done.stdout, (argv, done.stderr)
    assert _main([*listing, "--token-file", str(wrong_file)]).stderr.startswith("main.py jobs list: 401 ")
    for argv, says in (([*listing, "--token-file", str(token_file), "--token", TOKEN], "give one of them"),
                       ([*listing, "--token-file", str(tmp_path / "missing")], "cannot read"),
                       ([*listing, "--token", "-"], "standard input holds no token")):
        done = _main(argv, "")
        assert done.returncode == 2 and says in done.stderr and done.stderr.count("\n") == 1, done.stderr


def _address_of_this_machine() -> str | None:
    """An address of this machine that is not loopback (where a route out exists)."""
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.1", 9))  # TEST-NET-1: nothing is sent, a route is chosen
        except OSError:
            return None
        address = probe.getsockname()[0]
    return None if address.startswith("127.") else address


def test_a_token_is_not_sent_over_plain_http_to_another_host_without_insecure(capsys):
    """Finding N5: `--server http://203.0.113.7:8080` sent the bearer token in clear."""
    from http.server import ThreadingHTTPServer
    from threading import Thread

    address = _address_of_this_machine()
    if address is None:
        pytest.skip("this machine has no address but loopback")
    receiver = Receiver()
    elsewhere = ThreadingHTTPServer((address, 0), receiver.server.RequestHandlerClass)  # records in `receiver`
    Thread(target=elsewhere.serve_forever, daemon=True).start()
    url = f"http://{address}:{elsewhere.server_address[1]}"
    try:
        refused = cli.main(["jobs", "get", PROJECT, "hourly", "--server", url, "--token", TOKEN])
        err = capsys.readouterr().err
        assert (refused, receiver.arrivals) == (2, [])
        assert err.count("\n") == 1 and "refusing to send the token over plain http://" in err, err
        sent = cli.main(["jobs", "get", PROJECT, "hourly", "--server", url, "--token", TOKEN, "--insecure"])
        capsys.readouterr()
    finally:
        elsewhere.shutdown()
        elsewhere.server_close()
        receiver.close()
    assert sent == 1  # the receiver's "ok" is not JSON; what matters is what it was sent
    assert receiver.arrivals[0].headers["Authorization"] == f"Bearer {TOKEN}"
