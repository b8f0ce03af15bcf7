"""CloudTasksQueue with a fake client: what each task looks like, names, ALREADY_EXISTS,
failures, and waits beyond Cloud Tasks' 30 days chained in hops through the real engine
and the real task handler."""

from __future__ import annotations

import json
import re
from datetime import timedelta

import pytest
from google.api_core import exceptions as gexc

from app.cloud_queues import chain_task_target
from config import limits
from config.settings import Settings, from_environment
from engine.adapters.cloud.cloud_tasks_queue import (
    DISPATCH_DEADLINE,
    MAX_HOP,
    AppEngineTarget,
    CloudTasksQueue,
    task_id,
    throttle_queue_id,
)
from engine.adapters.local.sqlite_store import SqliteJobStore
from engine.config_import import JobSnapshot, ProjectSnapshot
from engine.ports import Task
from engine.service import build_engine
from statemachine.definition import JobDefinition
from statemachine.policy import JobPolicy
from tests.cloud.fakes import FakeTasksClient, schedule_time
from tests.engine.harness import START, FakeClock, RecordingTarget
from web.app import create_app

SERVICE_URL = "https://proj.appspot.com"
QUEUE = "projects/proj/locations/us-central1/queues/chain"


def make_queue(clock=None, account="", client=None, app_engine=None):
    clock = clock or FakeClock()
    client = client or FakeTasksClient(clock)
    queue = CloudTasksQueue(client, "proj", "us-central1", "chain", SERVICE_URL + "/", "sek", account, clock=clock,
                            app_engine=app_engine)
    return queue, client, clock


def tick(eta, name="tick-proj-job-1.1-0"):
    return Task(name, "tick", {"project": "proj", "job": "job", "nonce": "1.1"}, eta)


def test_each_kind_posts_json_to_its_handler_with_the_secret():
    queue, client, clock = make_queue()
    eta = START + timedelta(minutes=5)
    start = Task("start-proj-job-inv-0-1-0", "start", {"invocation": "inv"}, eta)
    trigger = Task("trigger-proj-job-inv", "trigger", {"request": "inv"}, START)
    queue.enqueue_now([tick(eta), start, trigger])
    urls = [task.http_request.url for task in client.created]
    assert urls == [f"{SERVICE_URL}/internal/tasks/{path}" for path in ("tick", "start-invocation", "trigger")]
    first = client.created[0]
    assert schedule_time(first) == eta
    assert json.loads(first.http_request.body) == {
        "name": "tick-proj-job-1.1-0",
        "payload": {"project": "proj", "job": "job", "nonce": "1.1"},
        "eta": "2026-01-05T10:05:00.000Z",
    }
    assert dict(first.http_request.headers) == {"Content-Type": "application/json", "X-Sundial-Task-Secret": "sek"}
    assert first.http_request.http_method.name == "POST"
    assert not first.http_request.oidc_token.service_account_email
    assert queue.counters["enqueues"] == 3


def test_an_oidc_token_for_the_service_account_with_the_service_url_as_audience():
    queue, client, _ = make_queue(account="tasks@proj.iam.gserviceaccount.com")
    queue.enqueue_now([tick(START)])
    token = client.created[0].http_request.oidc_token
    assert (token.service_account_email, token.audience) == ("tasks@proj.iam.gserviceaccount.com", SERVICE_URL)


def test_on_app_engine_each_kind_is_an_app_engine_task_to_its_handler_on_this_service():
    queue, client, _ = make_queue(account="tasks@proj.iam.gserviceaccount.com", app_engine=AppEngineTarget("sundial"))
    eta = START + timedelta(minutes=5)
    start = Task("start-proj-job-inv-0-1-0", "start", {"invocation": "inv"}, eta)
    notify = Task("notify-proj-job-inv-1", "notify", {"invocation": "inv"}, START)
    queue.enqueue_now([tick(eta), start, notify])
    requests = [task.app_engine_http_request for task in client.created]
    handlers = ("tick", "start-invocation", "notify")
    assert [r.relative_uri for r in requests] == [f"/internal/tasks/{handler}" for handler in handlers]
    assert all(not task.http_request.url for task in client.created)  # nothing leaves Google
    first = requests[0]
    assert first.http_method.name == "POST"
    # The serving version of this service: no version is pinned, so a deploy moves the chain along.
    assert (first.app_engine_routing.service, first.app_engine_routing.version) == ("sundial", "")
    assert json.loads(first.body) == {
        "name": "tick-proj-job-1.1-0",
        "payload": {"project": "proj", "job": "job", "nonce": "1.1"},
        "eta": "2026-01-05T10:05:00.000Z",
    }
    # The secret still travels, a second proof beside App Engine's queue header.
    assert dict(first.headers) == {"Content-Type": "application/json", "X-Sundial-Task-Secret": "sek"}
    assert schedule_time(client.created[0]) == eta
    assert {task.dispatch_deadline for task in client.created} == {DISPATCH_DEADLINE}


def test_a_throttled_start_task_on_app_engine_is_an_app_engine_task_on_its_throttle_queue():
    queue, client, _ = make_queue(app_engine=AppEngineTarget("default"))
    start = Task("start-proj-job-inv-0-1-0", "start", {"invocation": "inv"}, START, queue="proj/backups")
    queue.enqueue_now([start])
    [task] = client.created
    assert task.name.rsplit("/tasks/", 1)[0] == (
        f"projects/proj/locations/us-central1/queues/{throttle_queue_id('chain', 'proj/backups')}")
    assert task.app_engine_http_request.relative_uri == "/internal/tasks/start-invocation"
    assert task.app_engine_http_request.app_engine_routing.service == "default"
    assert not task.http_request.url


def test_every_chain_task_carries_the_secret_and_a_queue_without_one_cannot_be_built():
    """The task handlers admit a task by its secret alone (web/guard.py): a token is no proof."""
    for app_engine in (None, AppEngineTarget("default")):
        queue, client, _ = make_queue(account="tasks@proj.iam.gserviceaccount.com", app_engine=app_engine)
        throttled = Task("start-proj-job-inv-0-1-0", "start", {"invocation": "inv"}, START, queue="proj/backups")
        queue.enqueue_now([tick(START), throttled])
        for task in client.created:
            request = task.app_engine_http_request if app_engine else task.http_request
            assert request.headers["X-Sundial-Task-Secret"] == "sek"
    with pytest.raises(ValueError, match="needs the task secret"):
        CloudTasksQueue(FakeTasksClient(FakeClock()), "proj", "us-central1", "chain", SERVICE_URL, "",
                        "tasks@proj.iam.gserviceaccount.com", clock=FakeClock())


def test_names_are_deterministic_hashed_and_within_cloud_tasks_rules():
    queue, client, _ = make_queue()
    long_name = "tick-" + "proj.with.dots/" * 60 + "-end"
    queue.enqueue_now([tick(START, "tick-a-b-1.1-0"), tick(START, long_name)])
    short, long = (task.name.rsplit("/tasks/", 1) for task in client.created)
    assert short == [QUEUE, task_id("tick-a-b-1.1-0")] and long[0] == QUEUE
    for name in (short[1], long[1]):
        assert re.fullmatch(r"[0-9a-f]{12}-[A-Za-z0-9_-]+", name) and len(name) <= 500
    assert short[1].endswith("-tick-a-b-1_1-0")
    # Sanitizing alone would make these two equal; the hash keeps them apart.
    assert task_id("tick-a.b") != task_id("tick-a_b")


def test_already_exists_is_success_and_nothing_is_created_twice():
    queue, client, _ = make_queue()
    queue.enqueue_now([tick(START)])
    queue.enqueue_now([tick(START)])  # the same enqueue again: a retry after a lost answer
    assert len(client.created) == 1
    assert queue.counters == {"enqueues": 2, "already_exists": 1}


def test_a_failed_enqueue_is_counted_and_logged_and_the_rest_still_go(caplog):
    queue, client, _ = make_queue()
    client.fail_with = [gexc.PermissionDenied("cloudtasks.tasks.create denied")]
    queue.enqueue_now([tick(START, "tick-a"), tick(START, "tick-b")])
    assert [json.loads(t.http_request.body)["name"] for t in client.created] == ["tick-b"]
    assert queue.counters["enqueue_failures"] == 1
    [record] = [r for r in caplog.records if r.getMessage() == "enqueue failed"]
    assert record.fields["error"].startswith("PERMISSION_DENIED cloudtasks.tasks.create denied")


def test_a_wait_beyond_the_limit_is_scheduled_29_days_out_with_its_real_eta_in_the_body():
    queue, client, clock = make_queue()
    eta = START + timedelta(days=60)
    queue.enqueue_now([tick(eta)])
    [task] = client.created
    assert schedule_time(task) == START + MAX_HOP
    assert json.loads(task.http_request.body)["eta"] == "2026-03-06T10:00:00.000Z"
    assert task.name.rsplit("/", 1)[1] == task_id("tick-proj-job-1.1-0")


# --- a 60-day tick, end to end through the engine and the task handler ---------------------


class AfterCommitStore:
    """The SQLite store, but enqueues go to Cloud Tasks after the commit, as the Datastore
    store does it (ndb's call_on_commit)."""

    def __init__(self, inner: SqliteJobStore, queue: CloudTasksQueue):
        self.inner, self.queue = inner, queue

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def run_in_transaction(self, body):
        pending = []

        class Tx:
            def __init__(self, tx):
                self._tx = tx

            def __getattr__(self, name):
                return getattr(self._tx, name)

            def enqueue(self, task):
                pending.append(task)

        def run(tx):
            pending.clear()  # only the last run of a retried body counts
            return body(Tx(tx))

        result = self.inner.run_in_transaction(run)
        self.queue.enqueue_now(list(pending))
        return result


def test_a_60_day_tick_is_chained_in_hops_and_fires_once_on_time(tmp_path):
    clock = FakeClock()
    client = FakeTasksClient(clock)  # refuses schedule times beyond 30 days, like the service
    queue, _, _ = make_queue(clock, client=client)
    target = RecordingTarget()
    store = AfterCommitStore(SqliteJobStore(tmp_path / "db.sqlite"), queue)
    engine = build_engine(store, {"noop": target}, clock, service_url=SERVICE_URL, secret=b"sek")
    app = create_app(engine, Settings(task_secret="sek"))
    fire_at = START + timedelta(days=60)
    policy = JobPolicy(at=(fire_at,), revision="v1")
    definition = JobDefinition(id="job", at=("2027-01-01T00:00:00Z",), target={"noop": {}})
    job = JobSnapshot("job", policy, definition, False)
    engine.configs.import_project(ProjectSnapshot("proj", "v1", jobs=(job,)))

    ticks = []
    with app.test_client() as http:
        while client.pending:
            task, status = client.run_next(http)
            assert status == 200
            if task.http_request.url.endswith("/tick"):
                ticks.append(schedule_time(task))
    assert ticks == [START + MAX_HOP, START + 2 * MAX_HOP, fire_at]
    assert len({task.name for task in client.created}) == len(client.created)
    assert [(r.project, r.job_id, r.scheduled_time) for r in target.requests] == [("proj", "job", fire_at)]
    assert queue.counters["enqueue_failures"] == 0


def test_every_task_has_a_dispatch_deadline_longer_than_the_longest_attempt_it_makes():
    queue, client, _ = make_queue()
    queue.enqueue_now([tick(START), Task("start-x", "start", {"invocation": "inv"}, START)])
    deadlines = {task.dispatch_deadline for task in client.created}
    assert deadlines == {DISPATCH_DEADLINE}
    # An attempt (at most MAX_ATTEMPT_TIMEOUT on the cloud backend) and its recording fit in
    # it, and App Engine's 10 minutes under automatic scaling bound it.
    assert limits.MAX_ATTEMPT_TIMEOUT["cloud"] + timedelta(minutes=1) <= DISPATCH_DEADLINE <= timedelta(minutes=10)


# --- which form the running app chooses -------------------------------------------------


def test_on_app_engine_the_chain_is_app_engine_tasks_routed_to_this_service():
    on_app_engine = {"GAE_APPLICATION": "s~proj", "GAE_SERVICE": "sundial", "GAE_VERSION": "20260101t000000"}
    assert chain_task_target(from_environment(on_app_engine)) == AppEngineTarget("sundial")
    assert chain_task_target(from_environment({})) is None  # elsewhere: HTTP tasks to the service URL
    # Either choice can be forced: HTTP tasks on App Engine (a service behind its own domain),
    # App Engine tasks elsewhere (the app of the project, or an emulator's target port).
    assert chain_task_target(from_environment({**on_app_engine, "SUNDIAL_TASKS_TARGET": "http"})) is None
    assert chain_task_target(from_environment({"SUNDIAL_TASKS_TARGET": "appengine"})) == AppEngineTarget("")


def test_an_unknown_task_target_stops_the_start_naming_the_variable():
    with pytest.raises(SystemExit, match="SUNDIAL_TASKS_TARGET: expected one of appengine, http, got 'cloudrun'"):
        from_environment({"SUNDIAL_TASKS_TARGET": "cloudrun"})
