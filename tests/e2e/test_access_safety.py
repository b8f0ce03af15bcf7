"""docs/REFERENCE.md section 6 through a real server: the loopback-only mode refuses web pages
(cross-site forms, DNS rebinding), a token value that holds no token never opens the
server, and a UI session's cookie is neither a readable credential, nor enough for an
API change, nor valid after sign-out (a copied one included, across a restart)."""

from __future__ import annotations

import base64
import json
import re
import subprocess
import sys
import zlib

import pytest
import requests

from tests.e2e.support import ROOT, Server, free_port

PROJECT = "acl:\n  owners: [user:owner@example.com]\n  readers: [user:reader@example.com]\n" \
          "jobs:\n  - id: j\n    schedule: triggered\n    target: {noop: {}}\n"
TOKENS = "tok-owner=user:owner@example.com,tok-reader=user:reader@example.com,tok-x=user:x@example.com"


def start(tmp_path, env=None, name="s") -> Server:
    configs = tmp_path / "configs"
    configs.mkdir(exist_ok=True)
    (configs / "alpha.yaml").write_text(PROJECT)
    (configs / "beta.yaml").write_text("acl: {owners: [user:x@example.com]}\njobs: []\n")
    return Server(configs, tmp_path / "s.db", tmp_path / f"{name}.log", env=env).start()


@pytest.fixture
def open_server(tmp_path):
    server = start(tmp_path, {"SUNDIAL_API_TOKENS": ""})
    yield server
    server.stop()


def pause(server: Server, **headers) -> requests.Response:
    return requests.post(f"{server.url}/api/v1/projects/alpha/jobs/j:pause", timeout=10, **headers)


def paused(server: Server) -> bool:
    return server.get("/api/v1/projects/alpha/jobs/j")["paused"]


@pytest.mark.parametrize("headers, data", [
    ({"Origin": "http://evil.example", "Content-Type": "application/x-www-form-urlencoded"}, ""),
    ({"Origin": "http://evil.example", "Content-Type": "text/plain"}, '{"reason": "csrf"}'),
    ({"Origin": "null"}, ""),
    ({"Origin": "http://127.0.0.1:9"}, ""),  # another local port is another origin
    ({"Sec-Fetch-Site": "cross-site"}, ""),
])
def test_open_mode_refuses_changes_from_other_origins(open_server, headers, data):
    answer = pause(open_server, headers=headers, data=data)
    assert answer.status_code == 403 and answer.json()["error"]["code"] == "PERMISSION_DENIED"
    assert not paused(open_server)


def test_open_mode_serves_its_own_origin_and_programs_without_one(open_server):
    assert pause(open_server, headers={"Origin": open_server.url}).status_code == 200
    assert paused(open_server)
    assert requests.post(f"{open_server.url}/api/v1/projects/alpha/jobs/j:resume", timeout=10).status_code == 200
    for host in (f"localhost:{open_server.port}", f"[::1]:{open_server.port}", "127.0.0.2"):
        assert requests.get(f"{open_server.url}/api/v1/projects", headers={"Host": host},
                            timeout=10).status_code == 200, host


def test_open_mode_refuses_another_loopback_origin_on_the_same_port(open_server):
    """The origin must be the very host the request came to: a page served by another
    local process on 127.0.0.2 (or localhost) with the same port number is another origin."""
    port = open_server.port
    for origin, host in ((f"http://127.0.0.2:{port}", None), (f"http://localhost:{port}", None),
                         (f"http://127.0.0.1:{port}", f"localhost:{port}"), (f"http://[::1]:{port}", None)):
        headers = {"Origin": origin, **({"Host": host} if host else {})}
        answer = pause(open_server, headers=headers)
        assert answer.status_code == 403, (origin, host)
        assert answer.json()["error"]["code"] == "PERMISSION_DENIED"
    assert not paused(open_server)
    same = pause(open_server, headers={"Origin": f"http://localhost:{port}", "Host": f"localhost:{port}"})
    assert same.status_code == 200 and paused(open_server)


@pytest.mark.parametrize("host", ["rebind.evil.example:8080", "evil.example", "10.0.0.1", "127.0.0.1.evil.example"])
def test_open_mode_refuses_a_host_that_is_not_loopback(open_server, host):
    requests_made = (("GET", "/api/v1/projects"), ("GET", "/p/alpha"), ("POST", "/api/v1/projects/alpha/jobs/j:pause"))
    for method, path in requests_made:
        answer = requests.request(method, open_server.url + path, headers={"Host": host}, timeout=10)
        assert answer.status_code == 403, (method, path)
        assert "alpha" not in answer.text
    assert not paused(open_server)


@pytest.mark.parametrize("value", [",", "  ", " , ,"])
def test_a_tokens_value_with_no_token_is_an_error_at_start(tmp_path, value):
    env = {"SUNDIAL_API_TOKENS": value}
    done = subprocess.run([sys.executable, "main.py", "serve", "--host", "0.0.0.0", "--port", str(free_port()),
                           "--db", str(tmp_path / "s.db"), "--configs", str(tmp_path)],
                          cwd=ROOT, env={**__import__("os").environ, **env}, capture_output=True,
                          text=True, timeout=20)
    assert done.returncode != 0
    assert "SUNDIAL_API_TOKENS holds no token" in done.stderr
    assert "serving on" not in done.stdout + done.stderr


# --- signed-in sessions -------------------------------------------------------------------

HIDDEN = re.compile(r'name="csrf_token" value="([^"]+)"')


def sign_in(server: Server, token: str) -> tuple[requests.Session, str]:
    browser = requests.Session()
    csrf = HIDDEN.search(browser.get(f"{server.url}/signin", timeout=10).text).group(1)
    answer = browser.post(f"{server.url}/signin", data={"csrf_token": csrf, "token": token}, timeout=10)
    assert answer.status_code == 200 and "Signed in as" in answer.text
    return browser, HIDDEN.search(answer.text).group(1)


def cookie_payload(value: str) -> dict:
    compressed = value.startswith(".")
    data = value.lstrip(".").split(".")[0]
    raw = base64.urlsafe_b64decode(data + "=" * (-len(data) % 4))
    return json.loads(zlib.decompress(raw) if compressed else raw)


@pytest.fixture
def secured(tmp_path):
    server = start(tmp_path, {"SUNDIAL_API_TOKENS": TOKENS})
    yield server
    server.stop()


def test_the_session_cookie_holds_no_readable_token(secured):
    browser, _ = sign_in(secured, "tok-owner")
    cookie = browser.cookies["sundial_session"]
    assert "tok-owner" not in json.dumps(cookie_payload(cookie))
    assert "tok-owner" not in cookie


def test_an_api_change_by_cookie_needs_the_csrf_token(secured):
    browser, csrf = sign_in(secured, "tok-owner")
    url = f"{secured.url}/api/v1/projects/alpha/jobs/j:pause"
    refused = browser.post(url, headers={"Origin": "http://127.0.0.1:9999"}, data="", timeout=10)
    assert refused.status_code == 403 and "CSRF" in refused.json()["error"]["message"]
    owner = {"Authorization": "Bearer tok-owner"}
    job = requests.get(f"{secured.url}/api/v1/projects/alpha/jobs/j", headers=owner, timeout=10).json()
    assert job["paused"] is False
    assert browser.get(f"{secured.url}/api/v1/projects/alpha/jobs/j", timeout=10).status_code == 200  # reads need none
    assert browser.post(url, headers={"X-CSRF-Token": csrf}, timeout=10).status_code == 200


def test_signing_out_ends_the_session_and_every_copy_of_its_cookie(tmp_path, secured):
    browser, csrf = sign_in(secured, "tok-owner")
    copied = browser.cookies["sundial_session"]
    other_browser, _ = sign_in(secured, "tok-reader")
    assert browser.post(f"{secured.url}/signout", data={"csrf_token": csrf}, timeout=10).status_code == 200
    thief = {"Cookie": f"sundial_session={copied}"}
    assert requests.get(f"{secured.url}/api/v1/projects", headers=thief, timeout=10).status_code == 401
    assert other_browser.get(f"{secured.url}/api/v1/projects", timeout=10).status_code == 200
    secured.stop()
    restarted = start(tmp_path, {"SUNDIAL_API_TOKENS": TOKENS}, name="restarted")
    try:
        assert requests.get(f"{restarted.url}/api/v1/projects", headers=thief, timeout=10).status_code == 401
        assert requests.get(f"{restarted.url}/api/v1/projects", timeout=10,
                            cookies={"sundial_session": other_browser.cookies["sundial_session"]}).status_code == 200
    finally:
        restarted.stop()


def test_ui_pages_may_not_be_framed(secured):
    for path in ("/signin", "/static/ui.css"):
        answer = requests.get(secured.url + path, timeout=10)
        assert answer.headers["X-Frame-Options"] == "DENY", path
        assert "frame-ancestors 'none'" in answer.headers["Content-Security-Policy"]
        assert answer.headers["X-Content-Type-Options"] == "nosniff"


def test_metrics_show_a_project_only_to_its_readers(secured):
    def projects_in_metrics(token):
        text = requests.get(f"{secured.url}/metrics", headers={"Authorization": f"Bearer {token}"}, timeout=10).text
        return set(re.findall(r'sundial_jobs\{project="([^"]+)"', text))

    assert projects_in_metrics("tok-reader") == {"alpha"}
    assert projects_in_metrics("tok-x") == {"beta"}


@pytest.mark.parametrize("job_id", ["..", "...", "."])
def test_a_job_id_of_only_dots_is_refused(open_server, job_id):
    import http.client

    conn = http.client.HTTPConnection("127.0.0.1", open_server.port, timeout=10)
    body = json.dumps({"schedule": "triggered", "target": {"noop": {}}})
    conn.request("PUT", f"/api/v1/projects/beta/jobs/{job_id}", body=body,
                 headers={"Content-Type": "application/json"})  # sent as written, not normalised
    answer = conn.getresponse()
    assert answer.status in (400, 404), answer.status
    assert json.loads(answer.read())["error"]["code"] in ("INVALID_ARGUMENT", "NOT_FOUND")
    conn.close()
    assert [j["id"] for j in open_server.get("/api/v1/projects/beta/jobs")["jobs"]] == []
