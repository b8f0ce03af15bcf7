"""How `serve` starts, seen from outside: a port already taken or a database path that
cannot be created is one line on stderr before anything is written; SUNDIAL_PORT picks
the port; and the answers waitress gives itself (a body over the limit, a header block
too large) are the API's JSON, as every other answer is."""

from __future__ import annotations

import http.client
import json
import os
import socket
import subprocess
import sys

from tests.e2e.support import ROOT, Server, free_port


def _serve(tmp_path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "main.py", "serve", "--configs", str(tmp_path), *args],
                          cwd=ROOT, env={**os.environ, **(env or {})}, capture_output=True, text=True, timeout=60)


def test_a_port_in_use_is_one_line_and_no_database_is_created(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = _serve(tmp_path, "--port", str(port), "--db", str(tmp_path / "data" / "s.db"))
    assert done.returncode == 1
    assert done.stderr == (f"sundial: cannot listen on 127.0.0.1:{port}: the address is in use (another "
                           "server?); choose another with --port or SUNDIAL_PORT\n")
    assert not (tmp_path / "data").exists()


def test_sundial_port_is_the_port_and_a_port_in_use_there_is_named(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = _serve(tmp_path, "--db", str(tmp_path / "s.db"), env={"SUNDIAL_PORT": str(port)})
    assert done.returncode == 1 and f"127.0.0.1:{port}: the address is in use" in done.stderr
    done = _serve(tmp_path, "--db", str(tmp_path / "s.db"), env={"SUNDIAL_PORT": "70000"})
    assert (done.returncode, done.stderr) == (1, "SUNDIAL_PORT: expected a port from 1 to 65535, got 70000\n")


def test_a_database_path_under_a_file_is_one_line_and_nothing_is_created(tmp_path):
    (tmp_path / "plain").write_text("not a folder")
    done = _serve(tmp_path, "--port", str(free_port()), "--db", str(tmp_path / "plain" / "deeper" / "s.db"))
    assert done.returncode == 1
    assert done.stderr == (f"sundial: cannot create the database {tmp_path}/plain/deeper/s.db: "
                           f"{tmp_path}/plain is not a folder\n")
    assert "serving on" not in done.stdout


def _answer(port: int, send) -> tuple[int, str, dict]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        send(connection)
        response = connection.getresponse()
        return response.status, response.getheader("Content-Type"), json.loads(response.read())
    finally:
        connection.close()


def test_the_servers_own_refusals_are_the_apis_json(tmp_path):
    configs = tmp_path / "configs"
    configs.mkdir()
    server = Server(configs, tmp_path / "s.db", tmp_path / "server.log").start()
    try:
        def too_long_a_body(connection):
            # Only the head: the server refuses on the Content-Length before reading any body,
            # and closes, so a client still writing 2 MiB would meet a broken pipe.
            connection.putrequest("PUT", "/api/v1/projects/p/jobs/j")
            connection.putheader("Content-Type", "application/json")
            connection.putheader("Content-Length", str(2**21))
            connection.endheaders()
        too_large = _answer(server.port, too_long_a_body)
        assert too_large[:2] == (413, "application/json")
        assert too_large[2]["error"]["code"] == "PAYLOAD_TOO_LARGE" and "the limit" in too_large[2]["error"]["message"]

        def huge_header(connection):
            connection.putrequest("GET", "/healthz")
            connection.putheader("X-Padding", "a" * 300_000)
            connection.endheaders()
        assert _answer(server.port, huge_header)[:2] == (431, "application/json")
        assert _answer(server.port, lambda c: c.request("GET", "/healthz"))[0] == 200
    finally:
        server.stop()
