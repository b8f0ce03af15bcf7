"""A target that echoes its request leaves none of the job's credentials in the stored
invocation, on every backend: the token minted for `auth`, an `Authorization` literal, a
secret's value and the URL's credential-like query value are masked in the answer's
snippet and in the request record before they are written. Checked where readers look
(the API's invocation with its log) and in what the store holds (on SQLite, every row of
every table but the job's own, which keeps its definition as written)."""

from __future__ import annotations

import json
import sqlite3
from datetime import timedelta

import pytest

from config.settings import Settings
from engine.config_import import JobSnapshot, ProjectSnapshot
from engine.secrets import REDACTED as MASK  # what readers see instead of a credential
from engine.secrets import LocalSecrets
from engine.service import build_engine
from engine.targets.google_tokens import TokenMinter
from engine.targets.http import HttpTarget
from statemachine.definition import JobDefinition
from statemachine.identities import IdentityGrants, IdentityRules, ProjectIdentities
from statemachine.policy import JobPolicy, Tuning
from statemachine.safety import OwnService
from tests.contract.test_engine_scenarios import Scenario
from tests.engine.harness import START, FakeClock
from tests.support.echo import EchoServer
from tests.support.google_identity import Google
from web.app import create_app

SECRET_VALUE = "vendor-secret-value-31415"
QUERY_KEY = "url-query-key-27182"
LITERAL_BEARER = "literal-bearer-16180"


@pytest.fixture
def google():
    stand_ins = Google()
    yield stand_ins
    stand_ins.close()


@pytest.fixture
def echo():
    server = EchoServer()
    yield server
    server.close()


class EchoScenario(Scenario):
    """Scenario's clock and task loop over an engine whose HTTP target is real."""

    def __init__(self, backend, google: Google, secrets_dir) -> None:
        self.backend, self.clock = backend, FakeClock()
        grant = IdentityRules(IdentityGrants({"proj": ProjectIdentities(frozenset({google.own}))}))
        self.http = HttpTarget(minter=TokenMinter(google.metadata.host, google.iam.url,
                                                  own=OwnService(identities=grant)))
        self.engine = build_engine(backend.store, {"http": self.http}, self.clock, Tuning(), secret=b"s",
                                   secrets=LocalSecrets(str(secrets_dir)))
        self.handle = self.engine.tasks.handle

    def define_jobs(self, targets: dict[str, dict]) -> None:
        jobs = tuple(JobSnapshot(job_id, JobPolicy(schedule_text="every 1m", revision="v1"),
                                 JobDefinition(id=job_id, schedule="every 1m", target=target), False)
                     for job_id, target in targets.items())
        self.engine.configs.import_project(ProjectSnapshot("proj", "v1", jobs=jobs))


def _sqlite_rows(backend) -> dict[str, str]:
    """Every row of every table of the SQLite database, as text, by table."""
    connection = sqlite3.connect(backend.path)
    try:
        tables = [name for (name,) in connection.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        return {table: repr(connection.execute(f'SELECT * FROM "{table}"').fetchall()) for table in tables}
    finally:
        connection.close()


def test_an_echoing_target_leaves_no_credential_in_the_stored_invocation(backend, google, echo, tmp_path):
    (tmp_path / "secrets" / "proj").mkdir(parents=True)
    (tmp_path / "secrets" / "proj" / "VENDOR").write_text(SECRET_VALUE + "\n")
    scenario = EchoScenario(backend, google, tmp_path / "secrets")
    scenario.define_jobs({
        "minted": {"http": {"url": f"{echo.url}/minted?api_key={QUERY_KEY}&day=1",
                            "headers": {"X-Vendor": {"secret": "VENDOR"}},
                            "auth": {"oidc": {"service_account": google.own}}}},
        "literal": {"http": {"url": f"{echo.url}/literal", "headers": {"Authorization": f"Bearer {LITERAL_BEARER}"}}},
    })
    try:
        scenario.run_until(START + timedelta(minutes=1, seconds=30))
    finally:
        scenario.http.close()
    token = next(got["Authorization"] for path, got in echo.received if path.startswith("/minted"))
    token = token.removeprefix("Bearer ")
    echoed = {path.split("?")[0]: got for path, got in echo.received}
    assert echoed["/minted"]["X-Vendor"] == SECRET_VALUE
    assert echoed["/literal"]["Authorization"] == f"Bearer {LITERAL_BEARER}"
    credentials = (token[:24], token[-24:], SECRET_VALUE, QUERY_KEY, LITERAL_BEARER)

    client = create_app(scenario.engine, Settings(task_secret="t", demo_echo=False)).test_client()
    for job_id in ("minted", "literal"):
        [row] = scenario.invocations(job_id)
        assert row.status == "SUCCEEDED", row.reason
        shown = client.get(f"/api/v1/projects/proj/jobs/{job_id}/invocations/{row.id}")
        assert shown.status_code == 200
        text = json.dumps([shown.get_json(), row.log])
        assert [piece for piece in credentials if piece in text] == [], text
        [answer] = [entry for entry in row.log if entry["message"] == "attempt 1: succeeded"]
        assert f"{MASK}" in answer["detail"] and answer["detail"].startswith(f"HTTP 200 OK\npath: /{job_id}")
    if backend.name == "sqlite":  # only the job's own row holds its literals: its definition, as written
        tables = _sqlite_rows(backend)
        assert MASK in tables["invocations"]
        assert {table for table, rows in tables.items() for piece in credentials if piece in rows} <= {"jobs"}
