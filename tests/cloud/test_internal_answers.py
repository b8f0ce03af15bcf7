"""What the task handler answers Cloud Tasks when a task cannot be done now: never 503 or
429, which Cloud Tasks reads as an overloaded target and answers by slowing the whole
queue (every job's chain). A tick that came early is handed back as a fresh task due
at its time (200); a storage failure is a 500, which the queue retries with its own
backoff and no throttling."""

from __future__ import annotations

from datetime import timedelta

from config.settings import Settings
from engine.ports import RetryTask, StoreError, Task
from tests.cloud.test_guard import SECRET, TASK_BODY
from web.app import create_app, gatekeepers_from_settings

HEADERS = {"X-Sundial-Task-Secret": SECRET}


class Tasks:
    def __init__(self, failure: Exception):
        self.failure, self.handed_back = failure, []
        self.tasks = self

    def handle(self, task: Task) -> None:
        raise self.failure

    def hand_back(self, task: Task, delay: timedelta) -> Task:
        again = Task(task.name + "/again", task.kind, task.payload, task.eta + delay)
        self.handed_back.append((task.name, delay))
        return again


def _post(engine) -> tuple[int, dict]:
    settings = Settings(task_secret=SECRET)
    client = create_app(engine, settings, {}, gatekeepers=gatekeepers_from_settings(settings)).test_client()
    response = client.post("/internal/tasks/tick", json=TASK_BODY, headers=HEADERS)
    return response.status_code, response.get_json()


def test_an_early_tick_is_handed_back_as_a_fresh_task_and_answered_200():
    engine = Tasks(RetryTask(timedelta(milliseconds=300), "tick arrived early"))
    status, body = _post(engine)
    assert (status, body["handed_back"]) == (200, TASK_BODY["name"] + "/again")
    assert engine.handed_back == [(TASK_BODY["name"], timedelta(milliseconds=300))]


def test_a_storage_failure_is_a_500_not_a_503():
    status, body = _post(Tasks(StoreError("datastore: transaction: 409 Transaction lock timeout.")))
    assert status == 500
    assert "lock timeout" in body["error"]["message"]
