"""The guard of the internal handlers (docs/REFERENCE.md section 6), through the Flask app.

Every forged request gets 403 and changes nothing: no task reaches the engine and no cron
job runs. A task handler wants the task secret (or App Engine's queue header there): a
valid OIDC token alone opens none, since a token is something Sundial mints for others
too; a cron handler also takes the token. OIDC tokens are real JWTs signed by a key made
here; google-auth's own verify_oauth2_token checks them, with Google's certificate
endpoint replaced by one that serves this key's certificate.
"""

from __future__ import annotations

import json
import time
from dataclasses import replace
from datetime import datetime, timedelta, timezone

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import NameOID
from google.auth import crypt, jwt

from config.settings import Settings
from statemachine.vocabulary import TaskKind
from web.app import create_app, gatekeepers_from_settings
from web.guard import CachedCerts, Guard, OidcVerifier, guard_from_settings

SECRET = "s3cret-task-secret"
ACCOUNT = "sundial-tasks@proj.iam.gserviceaccount.com"
SERVICE_URL = "https://proj.appspot.com"
TASK_BODY = {
    "name": "tick-p-j-1.1-0",
    "payload": {"project": "p", "job": "j", "nonce": "1.1"},
    "eta": "2026-01-05T10:00:00.000Z",
}


class RecordingEngine:
    def __init__(self):
        self.handled = []
        self.tasks = self  # the task handler calls engine.tasks.handle(task)

    def handle(self, task):
        self.handled.append(task)


class SigningKey:
    """An RSA key, its self-signed certificate, and a google-auth signer for it."""

    def __init__(self, key_id: str):
        self.key_id = key_id
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
        self.signer = crypt.RSASigner.from_string(pem, key_id)
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "test")])
        now = datetime.now(timezone.utc)
        certificate = (
            x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(1).not_valid_before(now - timedelta(days=1))
            .not_valid_after(now + timedelta(days=1)).sign(key, hashes.SHA256())
        )
        self.certificate = certificate.public_bytes(serialization.Encoding.PEM).decode()

    def token(self, **overrides) -> str:
        now = int(time.time())
        claims = {
            "iss": "https://accounts.google.com", "aud": SERVICE_URL, "email": ACCOUNT,
            "email_verified": True, "sub": "1234", "iat": now, "exp": now + 3600,
        }
        claims.update(overrides)
        return jwt.encode(self.signer, {k: v for k, v in claims.items() if v is not None}).decode()


class FakeCertsEndpoint:
    """Stands in for https://www.googleapis.com/oauth2/v1/certs."""

    class Response:
        def __init__(self, certs: dict):
            self.status, self.headers = 200, {}
            self.data = json.dumps(certs).encode()

    def __init__(self, *keys: SigningKey):
        self.certs = {key.key_id: key.certificate for key in keys}
        self.urls = []

    def __call__(self, url, method="GET", **kwargs):
        self.urls.append(url)
        return self.Response(self.certs)


@pytest.fixture(scope="module")
def google_key():
    return SigningKey("google-1")


@pytest.fixture(scope="module")
def stranger_key():
    return SigningKey("google-1")  # same key id, different key: a forged signature


@pytest.fixture
def certs(google_key):
    return FakeCertsEndpoint(google_key)


def make_app(on_app_engine=False, secret=SECRET, certs=None):
    engine = RecordingEngine()
    cron_runs = []
    settings = Settings(task_secret=secret, on_app_engine=on_app_engine)
    gatekeepers = gatekeepers_from_settings(settings)
    if certs is not None:
        guard = Guard(on_app_engine, secret, OidcVerifier(ACCOUNT, SERVICE_URL, certs))
        gatekeepers = replace(gatekeepers, guard=guard)
    cron = {"watchdog": lambda: cron_runs.append("watchdog") or 0}
    app = create_app(engine, settings, cron, gatekeepers=gatekeepers)
    return app.test_client(), engine, cron_runs


def call_task(client, headers):
    return client.post("/internal/tasks/tick", json=TASK_BODY, headers=headers)


def call_cron(client, headers):
    return client.get("/internal/cron/watchdog", headers=headers)


def assert_refused_and_nothing_ran(client, engine, cron_runs, headers):
    task, cron = call_task(client, headers), call_cron(client, headers)
    assert (task.status_code, cron.status_code) == (403, 403), headers
    assert task.get_json()["error"]["code"] == "PERMISSION_DENIED"
    assert engine.handled == [] and cron_runs == []


# --- forged requests -------------------------------------------------------------------

FORGED = {
    "no header at all": {},
    "App Engine queue header outside App Engine": {"X-AppEngine-QueueName": "default"},
    "Cloud Tasks queue header outside App Engine": {"X-CloudTasks-QueueName": "sundial"},
    "App Engine cron header outside App Engine": {"X-Appengine-Cron": "true"},
    "all platform headers at once": {"X-AppEngine-QueueName": "q", "X-CloudTasks-QueueName": "q",
                                     "X-Appengine-Cron": "true"},
    "wrong secret": {"X-Sundial-Task-Secret": "guess"},
    "secret with a suffix": {"X-Sundial-Task-Secret": SECRET + "x"},
    "empty secret": {"X-Sundial-Task-Secret": ""},
    "non-ASCII secret": {"X-Sundial-Task-Secret": "s\u00e9cret"},
    "secret in the wrong header": {"X-Sundial-Secret": SECRET},
    "bearer without a token": {"Authorization": "Bearer "},
    "bearer garbage": {"Authorization": "Bearer not.a.jwt"},
    "secret as a bearer token": {"Authorization": f"Bearer {SECRET}"},
}


@pytest.mark.parametrize("headers", FORGED.values(), ids=FORGED.keys())
def test_forged_requests_are_refused_outside_app_engine(headers, certs):
    assert_refused_and_nothing_ran(*make_app(certs=certs), headers)


def test_an_unset_secret_admits_nobody(certs):
    client, engine, cron_runs = make_app(secret="", certs=certs)
    for headers in ({"X-Sundial-Task-Secret": ""}, {}):
        assert_refused_and_nothing_ran(client, engine, cron_runs, headers)


BAD_TOKENS = {
    "expired": dict(iat=int(time.time()) - 7200, exp=int(time.time()) - 3600),
    "wrong audience": dict(aud="https://evil.example.com"),
    "audience with the task path": dict(aud=SERVICE_URL + "/internal/tasks/tick"),
    "another service account": dict(email="intruder@proj.iam.gserviceaccount.com"),
    "unverified email": dict(email_verified=False),
    "no email": dict(email=None),
    "wrong issuer": dict(iss="https://issuer.example.com"),
}


@pytest.mark.parametrize("claims", BAD_TOKENS.values(), ids=BAD_TOKENS.keys())
def test_bad_oidc_tokens_are_refused(claims, google_key, certs):
    token = google_key.token(**claims)
    assert_refused_and_nothing_ran(*make_app(certs=certs), {"Authorization": f"Bearer {token}"})


def test_a_token_signed_by_another_key_is_refused(stranger_key, certs):
    token = stranger_key.token()
    assert_refused_and_nothing_ran(*make_app(certs=certs), {"Authorization": f"Bearer {token}"})


def test_a_good_token_in_another_scheme_is_refused(google_key, certs):
    headers = {"Authorization": f"Basic {google_key.token()}"}
    assert_refused_and_nothing_ran(*make_app(certs=certs), headers)


def test_unreachable_certificates_refuse_rather_than_fail(google_key):
    def down(url, method="GET", **kwargs):
        from google.auth.exceptions import TransportError

        raise TransportError("no route to www.googleapis.com")

    client, engine, cron_runs = make_app(certs=down)
    assert_refused_and_nothing_ran(client, engine, cron_runs, {"Authorization": f"Bearer {google_key.token()}"})


def test_on_app_engine_each_header_opens_only_its_own_door():
    client, engine, cron_runs = make_app(on_app_engine=True)
    assert call_task(client, {"X-Appengine-Cron": "true"}).status_code == 403
    assert call_cron(client, {"X-AppEngine-QueueName": "default"}).status_code == 403
    assert call_cron(client, {"X-Appengine-Cron": "yes"}).status_code == 403
    assert call_task(client, {}).status_code == 403
    assert engine.handled == [] and cron_runs == []


# --- the good ones ---------------------------------------------------------------------


def test_the_secret_admits_tasks_and_cron():
    client, engine, cron_runs = make_app()
    headers = {"X-Sundial-Task-Secret": SECRET}
    assert call_task(client, headers).status_code == 200
    assert call_cron(client, headers).status_code == 200
    assert [task.payload["nonce"] for task in engine.handled] == ["1.1"] and cron_runs == ["watchdog"]


def test_a_good_oidc_token_admits_cron_and_certificates_are_fetched_once(google_key, certs):
    client, engine, cron_runs = make_app(certs=CachedCerts(certs))
    headers = {"Authorization": f"Bearer {google_key.token()}"}
    assert call_cron(client, headers).status_code == 200
    assert call_cron(client, headers).status_code == 200
    assert cron_runs == ["watchdog", "watchdog"]
    assert certs.urls == ["https://www.googleapis.com/oauth2/v1/certs"]


@pytest.mark.parametrize("on_app_engine", [False, True], ids=["elsewhere", "App Engine with HTTP tasks"])
def test_a_valid_token_alone_opens_no_task_handler(on_app_engine, google_key, certs):
    """A Google-signed token of the tasks account for the service URL, exactly what Cloud
    Tasks puts on Sundial's own HTTP tasks (and what a tenant's `auth` target could once
    have Sundial mint), sent with a forged task."""
    client, engine, _ = make_app(on_app_engine=on_app_engine, certs=certs)
    token = {"Authorization": f"Bearer {google_key.token()}"}
    for kind in TaskKind:
        answer = client.post(f"/internal/tasks/{kind.handler_path}", json=TASK_BODY, headers=token)
        assert answer.status_code == 403, kind
    assert engine.handled == []
    both = {**token, "X-Sundial-Task-Secret": SECRET}  # what Sundial's own HTTP tasks carry
    assert call_task(client, both).status_code == 200 and len(engine.handled) == 1


def test_on_app_engine_the_app_engine_queue_header_admits_tasks():
    client, engine, _ = make_app(on_app_engine=True)
    assert call_task(client, {"X-AppEngine-QueueName": "sundial"}).status_code == 200
    assert len(engine.handled) == 1


CLOUD_TASKS_HEADERS = {"X-CloudTasks-QueueName": "sundial", "X-CloudTasks-TaskName": "forged",
                       "X-CloudTasks-TaskRetryCount": "0", "X-CloudTasks-TaskExecutionCount": "0"}


def test_cloud_tasks_headers_prove_nothing_even_on_app_engine(certs):
    # Every HTTP task carries them, including one a user's cloud_tasks target creates.
    for on_app_engine in (True, False):
        client, engine, cron_runs = make_app(on_app_engine=on_app_engine, certs=certs)
        assert_refused_and_nothing_ran(client, engine, cron_runs, CLOUD_TASKS_HEADERS)


def test_on_app_engine_the_cron_header_admits_cron_and_the_secret_still_works():
    client, engine, cron_runs = make_app(on_app_engine=True)
    assert call_cron(client, {"X-Appengine-Cron": "true"}).status_code == 200
    assert call_task(client, {"X-Sundial-Task-Secret": SECRET}).status_code == 200
    assert cron_runs == ["watchdog"] and len(engine.handled) == 1


def test_guard_from_settings_uses_the_service_account_and_the_service_url():
    settings = Settings(task_secret=SECRET, explicit_service_url=SERVICE_URL + "/", tasks_service_account=ACCOUNT)
    guard = guard_from_settings(settings)
    verifier = guard._verify_token
    assert (verifier.service_account, verifier.audience) == (ACCOUNT, SERVICE_URL)
    assert guard_from_settings(Settings(task_secret=SECRET))._verify_token is None


@pytest.mark.parametrize("header", ["X-CloudTasks-TaskRetryCount", "X-AppEngine-TaskRetryCount"])
def test_the_queues_retry_count_marks_a_task_as_run_before(header):
    client, engine, _ = make_app()
    for count in ("0", "2", "junk"):
        assert call_task(client, {"X-Sundial-Task-Secret": SECRET, header: count}).status_code == 200
    assert call_task(client, {"X-Sundial-Task-Secret": SECRET}).status_code == 200
    assert [task.retried for task in engine.handled] == [False, True, False, False]
