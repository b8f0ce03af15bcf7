"""The API over a real SQLite store, a fake clock and tasks run inline: Flask's test
client in front of tests/engine/harness.py's engine."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from app.importer import import_directory
from config.settings import Settings
from engine.ports import DeliveryResult
from statemachine.policy import Tuning
from tests.engine.harness import START, Harness
from web.app import create_app

DEMO = """\
jobs:
  - id: from-config
    schedule: every 1m
    target: {noop: {}}
"""


def at(seconds: float) -> str:
    """An RFC 3339 time `seconds` after the harness's start."""
    return (START + timedelta(seconds=seconds)).isoformat().replace("+00:00", "Z")


class Api(Harness):
    def __init__(self, tmp_path, tuning: Tuning | None = None):
        super().__init__(tmp_path, tuning)
        self.configs = tmp_path / "configs"
        self.configs.mkdir()
        self.write_config("demo", DEMO)
        self.app = create_app(self.engine, Settings(task_secret="t", demo_echo=False))
        self.client = self.app.test_client()

    def write_config(self, project: str, text: str) -> None:
        (self.configs / f"{project}.yaml").write_text(text)
        self.reimport()

    def reimport(self) -> None:
        import_directory(self.engine.configs, self.configs)

    def url(self, job: str, suffix: str = "", project: str = "demo") -> str:
        return f"/api/v1/projects/{project}/jobs/{job}{suffix}"

    def put(self, job: str, body, project: str = "demo"):
        if isinstance(body, (dict, list)):
            return self.client.put(self.url(job, project=project), json=body)
        return self.client.put(self.url(job, project=project), data=body)

    def post(self, job: str, action: str, body=None, **kwargs):
        return self.client.post(self.url(job, action), json=body, **kwargs)

    def get(self, path: str):
        return self.client.get(path)

    def job(self, job: str) -> dict:
        return self.client.get(self.url(job)).get_json()

    def history(self, job: str) -> list[dict]:
        """Every invocation of the job through the API, oldest first."""
        rows, token = [], None
        while True:
            query = "?page_size=1000" + (f"&page_token={token}" if token else "")
            page = self.client.get(self.url(job, "/invocations" + query)).get_json()
            rows += page["invocations"]
            token = page["next_page_token"]
            if not token:
                return list(reversed(rows))

    def delivered(self, job: str) -> list:
        return [r for r in self.target.requests if r.job_id == job]

    def until(self, seconds: float) -> datetime:
        self.run_until(START + timedelta(seconds=seconds))
        return self.clock.now()

    def answer(self, *outcomes: str) -> None:
        self.target.answers += [DeliveryResult(outcome) for outcome in outcomes]


def noop_job(**fields) -> dict:
    return {"target": {"noop": {}}, **fields}


def http_job(**fields) -> dict:
    return {"target": {"http": {"url": "http://127.0.0.1:9/run"}}, **fields}


def async_job(**fields) -> dict:
    return {"target": {"http": {"url": "http://127.0.0.1:9/run", "async": True}}, **fields}


def error_of(response) -> tuple[int, str]:
    body = response.get_json()
    return response.status_code, body["error"]["code"]


@pytest.fixture
def api(tmp_path) -> Api:
    return Api(tmp_path)
