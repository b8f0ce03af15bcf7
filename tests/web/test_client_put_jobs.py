"""The API client's `put_jobs` (cli/api_client.py) against the API on a real HTTP server on
127.0.0.1: a list longer than one batch goes in several `jobs:batchPut` requests, each
within the server's limits, and the results come back one per job in the order given."""

from __future__ import annotations

import json
import threading

import pytest
from werkzeug.serving import make_server

from cli.api_client import ApiClient, ApiFailure, batch_bodies
from config.limits import MAX_REQUEST_BYTES
from tests.web.conftest import Api, noop_job


@pytest.fixture
def served(tmp_path):
    api = Api(tmp_path)
    requests: list[int] = []

    def counting(environ, start_response):
        requests.append(int(environ.get("CONTENT_LENGTH") or 0))
        return api.app(environ, start_response)

    server = make_server("127.0.0.1", 0, counting)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield ApiClient(f"http://127.0.0.1:{server.server_port}"), api, requests
    server.shutdown()
    thread.join(5)


def test_a_list_longer_than_one_batch_is_sent_in_batches_and_answered_in_order(served):
    client, api, requests = served
    jobs = [(f"r-{i}", noop_job(at=["2026-02-01T00:00:00Z"])) for i in range(1_500)]
    jobs.insert(700, ("bad", noop_job(schedule="every 1m", overlap="sometimes")))
    results = client.put_jobs("demo", jobs)
    assert [r["id"] for r in results] == [job_id for job_id, _ in jobs]
    assert [r["status"] for r in results] == [201] * 700 + [400] + [201] * 800
    assert results[700]["error"]["code"] == "INVALID_ARGUMENT"
    assert len(requests) == 2 and api.job("r-1499")["state"] == "SCHEDULED"


def test_big_jobs_are_sent_in_batches_within_the_request_limit(served):
    client, api, requests = served
    body = noop_job(schedule="every 1m", description="x" * 990)
    jobs = [(f"big-{i}", {**body, "labels": {"n": str(i)}}) for i in range(600)]  # ~610 KB in all
    assert {r["status"] for r in client.put_jobs("demo", jobs)} == {201}
    assert len(requests) == 2 and max(requests) <= MAX_REQUEST_BYTES


def test_a_batch_the_server_refuses_whole_raises(served):
    client, _, _ = served
    with pytest.raises(ApiFailure) as refused:
        client.put_jobs("demo", [("a", noop_job(schedule="every 1m")), ("a", noop_job(schedule="every 1m"))])
    assert refused.value.status == 400 and "more than once" in refused.value.message
    with pytest.raises(ApiFailure) as missing:
        client.put_jobs("nope", [("a", noop_job(schedule="every 1m"))])
    assert missing.value.status == 404


def test_each_batch_body_is_exactly_as_large_as_counted():
    jobs = [(f"j-{i}", {"target": {"noop": {}}, "description": "é" * (i % 50)}) for i in range(300)]
    batches = list(batch_bodies(jobs, most_jobs=1_000, most_bytes=4_000))
    assert [entry["id"] for batch in batches for entry in batch] == [job_id for job_id, _ in jobs]
    assert max(len(json.dumps({"jobs": batch}).encode()) for batch in batches) <= 4_000
    assert len(batches) > 1 and all(len(batch) <= 1_000 for batch in batches)
