"""Secret-backed header values: validated in the config, read at delivery time from the
project's own directory or Secret Manager secrets (its REST API, served here by a local HTTP
server speaking its answers), and hidden wherever headers are shown."""

from __future__ import annotations

import base64
import json
import threading
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import requests

from config.loader import parse_project_text
from engine.adapters.cloud.secret_manager import SecretManagerSecrets
from engine.rendering import HeaderInjectionError, render_target, secret_backed_headers
from engine.secrets import REDACTED, LocalSecrets, SecretError, redact_headers
from statemachine.template import TemplateContext

CONTEXT = TemplateContext(datetime(2026, 1, 5, 10, tzinfo=timezone.utc), "UTC", "p", "j", "inv", 1, 0, 1)
TARGET = {"http": {"url": "https://api.example.com/${jobId}", "headers": {
    "Authorization": {"secret": "api-token", "prefix": "Bearer "}, "X-Day": "${todaysDate}"}}}


def job_text(header_value: str) -> str:
    return ("jobs:\n  - id: j\n    schedule: every 1m\n    target:\n      http:\n"
            "        url: https://api.example.com/run\n"
            f"        headers: {{Authorization: {header_value}}}\n")


def test_a_header_may_name_a_secret_and_the_config_never_holds_its_value():
    project = parse_project_text("p", job_text('{secret: api-token, prefix: "Bearer "}'), "p.yaml")
    assert project.jobs[0].definition.target["http"]["headers"]["Authorization"] == {
        "secret": "api-token", "prefix": "Bearer "}


@pytest.mark.parametrize("value, message", [
    ("{secret: 'bad name!'}", "is not a secret name"),
    ("{secret: ''}", "secret"),
    ("{secret: t, suffix: x}", "suffix"),
    ('{secret: t, prefix: "a\\nb"}', "line breaks"),
])
def test_a_bad_secret_reference_is_a_located_validation_error(value, message):
    project = parse_project_text("p", job_text(value), "p.yaml")
    assert project.jobs == ()  # the job is skipped, with its error shown
    first = project.job_errors[0]
    assert (first.file, first.line) == ("p.yaml", 7) and message in first.message, first


def secrets_dir(tmp_path, project: str = "p", **values: str) -> LocalSecrets:
    folder = tmp_path / "secrets" / project
    folder.mkdir(parents=True, exist_ok=True)
    for name, value in values.items():
        (folder / name.replace("_", "-")).write_text(value)
    return LocalSecrets(str(tmp_path / "secrets"))


def test_local_secrets_come_from_the_projects_own_directory(tmp_path):
    secrets = secrets_dir(tmp_path, db_pass="from-file\n")
    assert secrets("p", "db-pass") == "from-file"
    with pytest.raises(SecretError, match="^unknown secret missing$"):
        secrets("p", "missing")


def test_a_project_never_reads_another_projects_secret_or_the_servers(tmp_path):
    secrets = secrets_dir(tmp_path, "alpha", alpha_key="alpha-value")
    (tmp_path / "secrets" / "prod-db").write_text("server-level")  # the old global layout
    env = {"SUNDIAL_SECRET_PROD_DB": "env-value", "SUNDIAL_SECRET_ALPHA_KEY": "env-value",
           "SUNDIAL_SECRETS_DIR": str(tmp_path / "secrets")}
    from config.settings import from_environment

    for store in (secrets, LocalSecrets(from_environment(env).secrets_dir)):
        assert store("alpha", "alpha-key") == "alpha-value"
        for project, name in (("beta", "alpha-key"), ("beta", "prod-db"), ("alpha", "prod-db"),
                              ("beta", ".."), ("..", "alpha-key"), ("alpha/..", "prod-db")):
            with pytest.raises(SecretError):
                store(project, name)


def test_secret_manager_ids_are_per_project_and_never_shared():
    from engine.secrets import secret_manager_id

    pairs = [("a", "b-c"), ("a-b", "c"), ("a", "b_c"), ("a-", "x"), ("a", "-x"), ("a", "_x")]
    ids = {secret_manager_id(project, name) for project, name in pairs}
    assert len(ids) == len(pairs)


def test_rendering_puts_the_secret_in_the_header_and_nothing_else_is_templated(tmp_path):
    rendered = render_target(TARGET, CONTEXT, secrets_dir(tmp_path, api_token="s3cr${jobId}"))
    headers = rendered["http"]["headers"]
    assert headers == {"Authorization": "Bearer s3cr${jobId}", "X-Day": "2026-01-05"}
    assert rendered["http"]["url"] == "https://api.example.com/j"
    assert secret_backed_headers(TARGET) == {"Authorization"}
    assert redact_headers(headers, secret_backed_headers(TARGET)) == {
        "Authorization": REDACTED, "X-Day": REDACTED}  # not a harmless header: masked too


def test_a_secret_with_a_line_break_cannot_inject_headers(tmp_path):
    with pytest.raises(HeaderInjectionError) as error:
        render_target(TARGET, CONTEXT, secrets_dir(tmp_path, api_token="x\r\nEvil: 1"))
    assert "x\r\nEvil" not in str(error.value)  # the message never carries the secret


def test_credential_headers_are_redacted_even_when_written_out():
    assert redact_headers({"authorization": "Basic abc", "Cookie": "c", "Accept": "a"}) == {
        "authorization": REDACTED, "Cookie": REDACTED, "Accept": "a"}


def test_a_harmless_header_whose_value_is_a_secret_is_redacted():
    assert redact_headers({"Content-Type": "text/x-secret", "Accept": "a"}, frozenset({"Content-Type"})) == {
        "Content-Type": REDACTED, "Accept": "a"}


class SecretManagerStandIn:
    """Answers `GET /v1/projects/P/secrets/N/versions/latest:access` as Secret Manager does."""

    def __init__(self, values: dict):
        self.requests = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                outer.requests.append(self.path)
                name = self.path.split("/secrets/")[1].split("/")[0]
                if name not in values:
                    self.send_response(404)
                    self.end_headers()
                    return
                body = json.dumps({"name": name, "payload": {
                    "data": base64.b64encode(values[name].encode()).decode()}}).encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def test_secret_manager_values_are_read_once_per_cache_period():
    stand_in = SecretManagerStandIn({"sundial_p_api-token": "sm-value", "sundial_q_other": "q"})
    now = [0.0]
    try:
        secrets = SecretManagerSecrets("proj", requests.Session(), stand_in.url, clock=lambda: now[0])
        assert [secrets("p", "api-token") for _ in range(3)] == ["sm-value"] * 3
        now[0] = 301.0
        assert secrets("p", "api-token") == "sm-value"
        assert stand_in.requests == ["/v1/projects/proj/secrets/sundial_p_api-token/versions/latest:access"] * 2
        with pytest.raises(SecretError, match="^unknown secret nope$"):
            secrets("p", "nope")
        with pytest.raises(SecretError, match="^unknown secret other$"):
            secrets("p", "other")  # project q's secret
        assert secrets("q", "other") == "q"
    finally:
        stand_in.close()


def test_a_delivery_carries_the_secret_and_nothing_stored_holds_it(tmp_path):
    from tests.web.conftest import Api

    api = Api(tmp_path)
    api.engine.deliveries.secrets = secrets_dir(tmp_path, "demo", api_token="tok-9f3a")
    body = {"schedule": "triggered", "target": {"http": {
        "url": "http://127.0.0.1:9/run", "headers": {"Authorization": {"secret": "api-token", "prefix": "Bearer "}}}}}
    assert api.put("j", body).status_code == 201
    invocation = api.post("j", ":trigger").get_json()["id"]
    api.until(1)
    sent = api.delivered("j")[0].target["http"]["headers"]
    assert sent["Authorization"] == "Bearer tok-9f3a"
    stored = json.dumps([api.job("j"), api.client.get(api.url("j", f"/invocations/{invocation}")).get_json()])
    assert "tok-9f3a" not in stored and "api-token" in stored


def test_a_missing_secret_fails_the_attempt_with_its_name(tmp_path):
    from tests.web.conftest import Api

    api = Api(tmp_path)
    api.engine.deliveries.secrets = secrets_dir(tmp_path, "demo", nope="there at PUT")
    secrets_dir(tmp_path, "other-project", nope="another project's")
    body = {"schedule": "triggered", "target": {"http": {
        "url": "http://127.0.0.1:9/run", "headers": {"X-Key": {"secret": "nope"}}}}}
    assert api.put("j", body).status_code == 201
    (tmp_path / "secrets" / "demo" / "nope").unlink()  # removed after the job was made
    invocation = api.post("j", ":trigger").get_json()["id"]
    api.until(1)
    row = api.client.get(api.url("j", f"/invocations/{invocation}")).get_json()
    assert row["status"] == "FAILED" and row["reason"] == "unknown secret nope"
    assert api.delivered("j") == []


def test_a_put_naming_a_secret_the_project_lacks_is_refused(tmp_path):
    from tests.web.conftest import Api

    api = Api(tmp_path)
    api.engine.deliveries.secrets = secrets_dir(tmp_path, "demo", api_token="tok")
    secrets_dir(tmp_path, "other", their_key="not yours")
    def body(name):
        return {"schedule": "triggered", "target": {"http": {
            "url": "http://127.0.0.1:9/run", "headers": {"X-Key": {"secret": name}}}}}
    answer = api.put("j", body("their-key"))
    assert answer.status_code == 400
    assert answer.get_json()["error"]["message"] == (
        "target.http.headers.X-Key: unknown secret their-key (project demo has no secret of that name)")
    assert api.put("j", body("api-token")).status_code == 201
