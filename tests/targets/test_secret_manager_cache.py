"""The Secret Manager cache under concurrency: one read per cold secret however many
requests ask at once, and a refresh in the background before the value expires.

A stand-in Secret Manager on 127.0.0.1 holds its answers until the test opens a gate,
so "while a read is in progress" is a state the test controls, not a race it hopes for.
"""

from __future__ import annotations

import base64
import json
import threading
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import requests

from engine.adapters.cloud.secret_manager import (
    CACHE_SECONDS,
    REFRESH_AFTER_SECONDS,
    REFRESH_RETRY_SECONDS,
    SecretManagerSecrets,
)
from engine.secrets import SecretError, UnknownSecret
from tests.e2e.support import wait_until

SECRET_ID = "sundial_p_token"


class GatedSecretManager:
    """Answers `...versions/latest:access` as Secret Manager does, once `gate` is set.
    `values[SECRET_ID]` may be changed, set to an int status to fail, or deleted (404)."""

    def __init__(self, values: dict):
        self.values, self.requests, self.gate = values, [], threading.Event()
        self.gate.set()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                outer.requests.append(self.path)
                outer.gate.wait(10)
                answer = outer.values.get(self.path.split("/secrets/")[1].split("/")[0], 404)
                if isinstance(answer, int):
                    self.send_response(answer)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                body = json.dumps({"payload": {"data": base64.b64encode(answer.encode()).decode()}}).encode()
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
        self.gate.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def stand_in():
    server = GatedSecretManager({SECRET_ID: "v1"})
    yield server
    server.close()


@pytest.fixture
def now():
    return [0.0]


@pytest.fixture
def secrets(stand_in, now):
    session = requests.Session()
    session.mount("http://", requests.adapters.HTTPAdapter(pool_maxsize=64))
    return SecretManagerSecrets("proj", session, stand_in.url, clock=lambda: now[0])


def outcome(secrets):
    try:
        return secrets("p", "token")
    except SecretError as error:
        return error


def ask_at_once(secrets, callers: int) -> list:
    """`callers` threads ask for the secret together; each gets its value or its error."""
    with ThreadPoolExecutor(max_workers=callers) as pool:
        return list(pool.map(lambda _: outcome(secrets), range(callers)))


def test_many_requests_for_a_cold_secret_make_one_read(stand_in, secrets):
    stand_in.gate.clear()
    threading.Timer(0.5, stand_in.gate.set).start()  # every caller is waiting by then
    assert ask_at_once(secrets, 32) == ["v1"] * 32
    assert len(stand_in.requests) == 1


def test_a_failed_cold_read_fails_its_waiters_and_the_next_request_reads_again(stand_in, secrets):
    stand_in.values[SECRET_ID] = 429
    stand_in.gate.clear()
    threading.Timer(0.5, stand_in.gate.set).start()
    outcomes = ask_at_once(secrets, 8)
    assert all(isinstance(outcome, SecretError) and "429" in str(outcome) for outcome in outcomes)
    assert len(stand_in.requests) == 1
    stand_in.values[SECRET_ID] = "v1"
    assert secrets("p", "token") == "v1"
    assert len(stand_in.requests) == 2


def test_before_expiry_the_value_is_served_while_one_background_read_refreshes_it(stand_in, secrets, now):
    assert secrets("p", "token") == "v1"
    stand_in.values[SECRET_ID] = "v2"
    stand_in.gate.clear()  # the refresh hangs until the gate opens: nobody may wait for it
    now[0] = REFRESH_AFTER_SECONDS + 1
    assert ask_at_once(secrets, 16) == ["v1"] * 16
    assert wait_until(lambda: len(stand_in.requests) == 2, 5)
    stand_in.gate.set()
    assert wait_until(lambda: secrets("p", "token") == "v2", 5)
    assert len(stand_in.requests) == 2
    now[0] = REFRESH_AFTER_SECONDS + CACHE_SECONDS - 1  # the refreshed value's own period
    assert secrets("p", "token") == "v2"
    assert len(stand_in.requests) == 2


def test_a_failed_refresh_keeps_the_value_until_expiry_and_a_deleted_secret_is_dropped(stand_in, secrets, now):
    assert secrets("p", "token") == "v1"
    stand_in.values[SECRET_ID] = 503
    now[0] = REFRESH_AFTER_SECONDS + 1
    assert secrets("p", "token") == "v1"
    assert wait_until(lambda: len(stand_in.requests) == 2, 5)
    assert wait_until(lambda: secrets("p", "token") == "v1", 5)
    assert len(stand_in.requests) == 2  # no second try before REFRESH_RETRY_SECONDS
    now[0] = REFRESH_AFTER_SECONDS + 1 + REFRESH_RETRY_SECONDS + 1
    assert secrets("p", "token") == "v1"
    assert wait_until(lambda: len(stand_in.requests) == 3, 5)
    del stand_in.values[SECRET_ID]  # deleted: the next refresh's 404 drops the cached value
    now[0] = CACHE_SECONDS - 1
    assert wait_until(lambda: isinstance(outcome(secrets), UnknownSecret), 5)
    now[0] = CACHE_SECONDS + 1
    stand_in.values[SECRET_ID] = 503
    with pytest.raises(SecretError, match="answered 503"):
        secrets("p", "token")  # nothing cached and unreadable: the attempt fails, to be retried
