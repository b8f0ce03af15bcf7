"""The cloud_tasks target: with a fake client (names, ALREADY_EXISTS, failures) and
against gcloud-tasks-emulator, which really dispatches the task to a receiver."""

from __future__ import annotations

import time
from datetime import datetime, timezone

import pytest
from google.api_core import exceptions as gexc

from config.settings import own_service
from engine.ports import DeliveryRequest
from engine.targets.cloud_tasks import CloudTasksTarget, task_id
from statemachine.safety import OwnService
from tests.cloud.fakes import FakeTasksClient

QUEUE = "projects/proj/locations/us-central1/queues/user-queue"
SCHEDULED = datetime(2018, 3, 22, 0, 9, tzinfo=timezone.utc)


def request(url="https://w.example.com/notify", queue=QUEUE, **fields) -> DeliveryRequest:
    spec = {"queue": queue, "url": url, "method": fields.pop("method", "POST"),
            "headers": fields.pop("headers", {"Content-Type": "application/json"}),
            "body": fields.pop("body", '{"id":"t-1"}')}
    defaults = dict(project="training", job_id="training-invitations", invocation_id="inv-7",
                    scheduled_time=SCHEDULED, attempt=1, event_index=0, event_count=1)
    return DeliveryRequest(target={"cloud_tasks": spec}, **{**defaults, **fields})


def test_creates_an_http_task_with_the_users_request_and_sundials_headers():
    client = FakeTasksClient()
    result = CloudTasksTarget(client).deliver(request(headers={"Content-Type": "application/json",
                                                               "X-Sundial-Job": "forged"}))
    assert result.outcome == "succeeded", result.reason
    [task] = client.created
    assert task.name == f"{QUEUE}/tasks/{task_id(request())}"
    http = task.http_request
    assert (http.url, http.http_method.name, bytes(http.body)) == (
        "https://w.example.com/notify", "POST", b'{"id":"t-1"}')
    assert dict(http.headers) == {
        "Content-Type": "application/json",
        "X-Sundial-Job": "training/training-invitations",
        "X-Sundial-Invocation": "inv-7",
        "X-Sundial-Scheduled-Time": "2018-03-22T00:09:00.000Z",
        "X-Sundial-Attempt": "1",
    }


def test_a_retry_of_the_same_attempt_is_the_same_task_and_counts_as_success():
    client = FakeTasksClient()
    target = CloudTasksTarget(client)
    assert target.deliver(request()).outcome == "succeeded"
    again = target.deliver(request())
    assert (again.outcome, len(client.created)) == ("succeeded", 1)
    assert "already created" in again.detail


def test_each_attempt_and_each_event_is_a_task_of_its_own():
    ids = {task_id(request(attempt=a, event_index=e, event_count=2)) for a in (1, 2) for e in (0, 1)}
    assert len(ids) == 4
    assert task_id(request(invocation_id="inv-8")) != task_id(request())
    for name in ids:
        assert len(name) <= 500 and name.replace("-", "").replace("_", "").isalnum()


def test_fanout_events_carry_x_sundial_event():
    client = FakeTasksClient()
    CloudTasksTarget(client).deliver(request(event_index=1, event_count=3))
    assert client.created[0].http_request.headers["X-Sundial-Event"] == "1/3"


def test_failures_are_failed_attempts_named_by_status():
    client = FakeTasksClient()
    client.fail_with = [gexc.NotFound("Queue does not exist."), gexc.PermissionDenied("denied")]
    target = CloudTasksTarget(client)
    assert target.deliver(request()).reason == "cloud_tasks: NOT_FOUND Queue does not exist."
    assert target.deliver(request()).reason == "cloud_tasks: PERMISSION_DENIED denied"


def test_a_body_with_a_method_that_cannot_carry_one_is_refused_before_sending():
    client = FakeTasksClient()
    result = CloudTasksTarget(client).deliver(request(method="GET"))
    assert result.outcome == "failed" and result.reason.startswith("invalid request: ")
    assert client.calls == 0
    assert CloudTasksTarget(client).deliver(request(method="GET", body="")).outcome == "succeeded"


# --- against gcloud-tasks-emulator ---------------------------------------------------------


@pytest.fixture
def emulator_client(tasks_emulator):
    from google.cloud import tasks_v2

    from engine.adapters.cloud.cloud_tasks_queue import build_tasks_client

    client = build_tasks_client(tasks_emulator.host)
    client.create_queue(parent="projects/proj/locations/us-central1",
                        queue=tasks_v2.Queue(name=QUEUE))
    return client


def wait_for(receiver, count: int, timeout: float = 10.0):
    deadline = time.monotonic() + timeout
    while len(receiver.requests) < count and time.monotonic() < deadline:
        time.sleep(0.05)
    return receiver.requests


def test_the_emulator_delivers_the_task_to_the_users_url(emulator_client, receiver):
    target = CloudTasksTarget(emulator_client)
    result = target.deliver(request(url=f"{receiver.url}/notify", invocation_id=f"inv-{time.time_ns()}"))
    assert result.outcome == "succeeded", result.reason
    [received] = wait_for(receiver, 1)
    assert (received.method, received.path, received.body) == ("POST", "/notify", b'{"id":"t-1"}')
    assert received.headers["X-Sundial-Job"] == "training/training-invitations"
    assert received.headers["X-Sundial-Attempt"] == "1"
    assert received.headers["X-Cloudtasks-Queuename"] == QUEUE


def test_a_missing_queue_in_the_emulator_fails_the_attempt(emulator_client):
    result = CloudTasksTarget(emulator_client).deliver(
        request(queue="projects/proj/locations/us-central1/queues/absent"))
    assert result.outcome == "failed" and result.reason.startswith("cloud_tasks: FAILED_PRECONDITION")


OWN = OwnService("https://sundial-prod.appspot.com", "sundial")


@pytest.mark.parametrize("url, queue, problem", [
    ("https://sundial-prod.appspot.com/internal/tasks/trigger", QUEUE,
     "is on Sundial's own service (https://sundial-prod.appspot.com)"),
    ("HTTPS://Sundial-Prod.appspot.com:443/api/v1/projects", QUEUE, "is on Sundial's own service"),
    ("https://w.example.com/notify", "projects/proj/locations/us-central1/queues/sundial",
     "queue sundial is Sundial's own"),
    ("https://w.example.com/notify", "projects/other/locations/eu/queues/sundial-t-p-t-1a2b3c4d",
     "queue sundial-t-p-t-1a2b3c4d is Sundial's own"),
])
def test_a_task_on_sundials_own_service_or_queues_is_refused_and_never_created(url, queue, problem):
    client = FakeTasksClient()
    result = CloudTasksTarget(client, own=OWN).deliver(request(url=url, queue=queue, headers={}))
    assert result.outcome == "failed" and result.reason.startswith("forbidden target: ")
    assert problem in result.reason and client.created == []


def test_framing_headers_never_reach_a_task():
    client = FakeTasksClient()
    headers = {"Content-Type": "application/json", "Content-Length": "0", "Host": "x", "Proxy-Y": "1"}
    assert CloudTasksTarget(client, own=OWN).deliver(request(headers=headers)).outcome == "succeeded"
    sent = dict(client.created[0].http_request.headers)
    assert "Content-Type" in sent and not {"Content-Length", "Host", "Proxy-Y"} & set(sent)


def test_a_task_whose_templates_rendered_past_cloud_tasks_limit_fails_before_sending():
    client = FakeTasksClient()
    result = CloudTasksTarget(client).deliver(request(body="y" * 100_000))
    assert result.outcome == "failed"
    assert "Cloud Tasks refuses a task over 100,000 bytes" in result.reason
    assert client.calls == 0


def test_a_task_on_cloud_runs_other_host_name_of_sundial_is_refused_and_never_created():
    """A Cloud Run service answers on two host names; either is Sundial's."""
    client = FakeTasksClient()
    own = own_service({"SUNDIAL_SERVICE_URL": "https://sundial-abc123-uc.a.run.app"})
    url = "https://sundial-987654321.us-central1.run.app/internal/tasks/trigger"
    result = CloudTasksTarget(client, own=own).deliver(request(url=url, headers={}))
    assert result.outcome == "failed"
    assert result.reason == f"forbidden target: {url} is on Sundial's own service (https://sundial-abc123-uc.a.run.app)"
    assert client.created == [] and client.calls == 0


# --- auth: the task carries the token request; Cloud Tasks mints it at dispatch -------------

SA = "sched@proj.iam.gserviceaccount.com"
GRANTED = own_service({"SUNDIAL_IDENTITIES": f"training={SA}",  # request()'s project
                       "SUNDIAL_IDENTITY_AUDIENCES": "training=https://w.example.com"})


@pytest.mark.parametrize("project, auth, reason", [
    ("other", {"oidc": {"service_account": SA}},
     f"forbidden identity: service_account: {SA} is not granted to project other"),
    ("training", {"oauth": {"service_account": "sundial@proj.iam.gserviceaccount.com"}},
     "forbidden identity: service_account: sundial@proj.iam.gserviceaccount.com is not granted to project training"),
    ("training", {"oidc": {"service_account": SA, "audience": "https://payroll.example.com"}},
     "forbidden identity: audience: https://payroll.example.com is not on the url's origin"),
], ids=["another project's account", "an account granted to nobody", "an audience off the url's origin"])
def test_a_task_whose_auth_the_project_was_not_granted_is_never_created(project, auth, reason):
    """Cloud Tasks would mint the token as Sundial's own account lets it: no task is asked for."""
    client = FakeTasksClient()
    delivered = request(project=project)
    delivered.target["cloud_tasks"]["auth"] = auth
    result = CloudTasksTarget(client, own=GRANTED).deliver(delivered)
    assert result.outcome == "failed" and result.reason.startswith(reason), result.reason
    assert client.created == [] and client.calls == 0


@pytest.mark.parametrize("auth, field, expected", [
    ({"oidc": {"service_account": SA}}, "oidc_token",
     {"service_account_email": SA, "audience": "https://w.example.com"}),
    ({"oidc": {"service_account": SA, "audience": "https://w.example.com/notify"}}, "oidc_token",
     {"service_account_email": SA, "audience": "https://w.example.com/notify"}),
    ({"oauth": {"service_account": SA, "scope": "https://www.googleapis.com/auth/cloud-platform"}}, "oauth_token",
     {"service_account_email": SA, "scope": "https://www.googleapis.com/auth/cloud-platform"}),
], ids=["oidc default audience", "oidc audience", "oauth"])
def test_auth_becomes_the_tasks_oidc_or_oauth_token(auth, field, expected):
    client = FakeTasksClient()
    delivered = request(url="https://w.example.com/notify?day=1")
    delivered.target["cloud_tasks"]["auth"] = auth
    assert CloudTasksTarget(client, own=GRANTED).deliver(delivered).outcome == "succeeded"
    [task] = client.created
    token = getattr(task.http_request, field)
    assert {name: getattr(token, name) for name in expected} == expected
    assert "Authorization" not in task.http_request.headers


def test_the_emulator_keeps_the_tasks_oidc_token(emulator_client, receiver):
    # On a paused queue of its own: the emulator takes a task out of the list while it
    # dispatches it, so on a running queue the listing below raced the dispatch.
    from google.cloud import tasks_v2

    paused = f"{QUEUE}-paused-{time.time_ns()}"
    emulator_client.create_queue(parent=QUEUE.rsplit("/queues/", 1)[0], queue=tasks_v2.Queue(name=paused))
    emulator_client.pause_queue(name=paused)
    delivered = request(url=f"{receiver.url}/status/500", queue=paused, invocation_id=f"inv-{time.time_ns()}")
    delivered.target["cloud_tasks"]["auth"] = {"oidc": {"service_account": SA, "audience": "https://w.example.com"}}
    assert CloudTasksTarget(emulator_client, own=GRANTED).deliver(delivered).outcome == "succeeded"
    [task] = [task for task in emulator_client.list_tasks(parent=paused) if task.name.endswith(task_id(delivered))]
    assert (task.http_request.oidc_token.service_account_email, task.http_request.oidc_token.audience) == (
        SA, "https://w.example.com")


def test_a_cloud_tasks_service_that_refuses_connections_fails_the_attempt_at_once():
    # The real client against a port nothing listens on: a failed attempt with its
    # reason within a second, so the job's retry policy decides what follows.
    import socket

    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        began = time.monotonic()
        result = CloudTasksTarget(emulator_host=f"127.0.0.1:{closed.getsockname()[1]}").deliver(request())
    assert result.outcome == "failed" and "UNAVAILABLE" in result.reason
    assert time.monotonic() - began < 1
