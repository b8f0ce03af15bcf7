"""The emulators behave as tests/support/emulators.py says, so that the tests built
on them test Sundial and not an emulator's quirk."""

from __future__ import annotations

import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest


class Recorder(ThreadingHTTPServer):
    """Records (path, headers, body) of every POST; answers 200."""

    daemon_threads = True

    def __init__(self, port: int = 0):
        self.seen: list[tuple[str, dict, bytes]] = []

        class Handler(BaseHTTPRequestHandler):
            def do_POST(handler):
                body = handler.rfile.read(int(handler.headers.get("Content-Length") or 0))
                self.seen.append((handler.path, dict(handler.headers.items()), body))
                handler.send_response(200)
                handler.send_header("Content-Length", "0")
                handler.end_headers()

            def log_message(handler, *args):
                pass

        super().__init__(("127.0.0.1", port), Handler)
        threading.Thread(target=self.serve_forever, args=(0.02,), daemon=True).start()

    def wait_for(self, count: int, timeout: float = 10.0) -> list:
        deadline = time.monotonic() + timeout
        while len(self.seen) < count and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.3)  # and nothing more arrives
        return self.seen

    def close(self) -> None:
        self.shutdown()
        self.server_close()


@pytest.fixture
def tasks_client(tasks_emulator):
    import grpc
    from google.cloud import tasks_v2
    from google.cloud.tasks_v2.services.cloud_tasks.transports import CloudTasksGrpcTransport

    channel = grpc.insecure_channel(tasks_emulator.host)
    yield tasks_v2.CloudTasksClient(transport=CloudTasksGrpcTransport(channel=channel))
    channel.close()


def test_the_tasks_emulator_posts_http_tasks_to_their_url_and_a_name_twice_twice(tasks_emulator, tasks_client):
    recorder = Recorder()
    try:
        task = {
            "name": f"{tasks_emulator.queue}/tasks/same-name",
            "http_request": {"url": f"http://127.0.0.1:{recorder.server_address[1]}/internal/tasks/tick",
                             "headers": {"Content-Type": "application/json", "X-Secret": "s"}, "body": b"{}"},
        }
        tasks_client.create_task(parent=tasks_emulator.queue, task=task)
        tasks_client.create_task(parent=tasks_emulator.queue, task=task)  # no ALREADY_EXISTS here
        seen = recorder.wait_for(2)
    finally:
        recorder.close()
    assert len(seen) == 2  # the emulator does not deduplicate names
    for path, headers, body in seen:
        assert (path, body, headers["Content-Type"], headers["X-Secret"]) == ("/internal/tasks/tick", b"{}",
                                                                               "application/json", "s")
        assert headers["X-Cloudtasks-Taskname"] == "same-name"
        assert headers["X-Cloudtasks-Queuename"] == tasks_emulator.queue


def test_the_tasks_emulator_posts_app_engine_tasks_to_its_target_port(tasks_emulator, tasks_client):
    recorder = Recorder(tasks_emulator.target_port)
    try:
        task = {"app_engine_http_request": {"relative_uri": "/internal/tasks/start", "body": b"x"}}
        tasks_client.create_task(parent=tasks_emulator.queue, task=task)
        seen = recorder.wait_for(1)
    finally:
        recorder.close()
    assert [(path, body) for path, _, body in seen] == [("/internal/tasks/start", b"x")]
    assert seen[0][1]["X-Appengine-Queuename"] == tasks_emulator.queue


def test_the_pubsub_emulator_serves_its_rest_api(pubsub_emulator):
    request = urllib.request.Request(
        f"http://{pubsub_emulator.host}/v1/projects/sundial-test/topics/emulator-check", method="PUT"
    )
    with urllib.request.urlopen(request, timeout=10) as answer:
        assert answer.status == 200


def test_the_datastore_emulator_resets_and_requires_the_indexes_of_index_yaml(datastore):
    from google.api_core.exceptions import FailedPrecondition

    from engine.adapters.cloud.datastore_entities import InvocationEntity, ProjectEntity, project_key

    client = datastore.client()
    with client.context(cache_policy=False):  # ndb's cache would answer from memory
        ProjectEntity(key=project_key("p"), config_hash="h").put()
        datastore.reset()
        assert project_key("p").get() is None
        with pytest.raises(FailedPrecondition):  # (status, -created_time) is not in index.yaml
            InvocationEntity.query(InvocationEntity.status == "FAILED").order(-InvocationEntity.created_time).fetch()


def test_the_firestore_emulator_resets_and_enforces_the_property_size_limit_but_not_indexes(firestore):
    from google.api_core.exceptions import InvalidArgument
    from google.cloud import ndb

    from engine.adapters.cloud.datastore_entities import (
        InvocationEntity,
        MetaEntity,
        ProjectEntity,
        meta_key,
        project_key,
    )

    client = firestore.client()
    with client.context(cache_policy=False):
        ProjectEntity(key=project_key("p"), config_hash="h").put()
        firestore.reset()
        assert project_key("p").get() is None
        # Production's limit for an unindexed property: 1,048,487 bytes (1 MiB - 89).
        MetaEntity(key=meta_key("at-limit"), value="x" * 1_048_487).put()
        with pytest.raises(InvalidArgument, match="longer than 1048487 bytes"):
            MetaEntity(key=meta_key("over"), value="x" * 1_048_488).put()
        # A query index.yaml has no index for runs anyway: tests on this emulator
        # do not check indexes (the Datastore emulator's tests do).
        InvocationEntity.query(InvocationEntity.status == "FAILED").order(-InvocationEntity.created_time).fetch()
        assert ndb.Key(MetaEntity, "over").get() is None
