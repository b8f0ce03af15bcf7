"""Invocations written before the notification had a field of their own kept its state
in their log. Reading such a row derives the state from the log once; its next write
stores it. (The Datastore's old entities: tests/contract/test_datastore.py.)"""

from __future__ import annotations

import json
import sqlite3

import pytest

from engine.adapters.local import schema
from engine.adapters.local.sqlite_store import SqliteJobStore
from engine.notify import Notifications
from engine.ports import DeliveryResult, InvocationRow, StoredJob
from engine.recording import legacy_notification
from statemachine.notification import NO_NOTIFICATION, NotificationState
from statemachine.record import new_record
from statemachine.vocabulary import NotificationStatus
from tests.contract import samples
from tests.engine.harness import START, FakeClock

S = NotificationStatus
ENQUEUED = {"message": "on_failure: notification enqueued"}


def sending(attempt: int) -> dict:
    return {"message": f"on_failure attempt {attempt} sending", "on_failure": "sending",
            "notification_attempt": attempt}


def failed(attempt: int, reason: str, then: str = "; retry at 2026-01-05T10:01:02.345678+00:00") -> dict:
    return {"message": f"on_failure attempt {attempt} failed: {reason}{then}", "on_failure": "failed",
            "notification_attempt": attempt}


def sent(attempt: int) -> dict:
    return {"message": f"on_failure attempt {attempt}: notified", "on_failure": "sent",
            "notification_attempt": attempt}


@pytest.mark.parametrize("log, state", [
    ([], NO_NOTIFICATION),
    ([{"message": "created"}, {"message": "finished: FAILED (http 500)"}], NO_NOTIFICATION),
    ([ENQUEUED], NotificationState(S.PENDING, 1)),
    ([ENQUEUED, sending(1)], NotificationState(S.SENDING, 1)),
    ([ENQUEUED, sending(1), failed(1, "http 502")], NotificationState(S.PENDING, 2, "http 502")),
    ([ENQUEUED, sending(1), failed(1, "a; b")], NotificationState(S.PENDING, 2, "a; b")),
    ([ENQUEUED, sending(1), failed(1, "http 502"), sending(2)], NotificationState(S.SENDING, 2, "http 502")),
    ([ENQUEUED, sending(1), failed(1, "http 502"), sending(2), sent(2)], NotificationState(S.SENT, 2, "http 502")),
    ([ENQUEUED, sending(1), failed(1, "gone", "; giving up")], NotificationState(S.GAVE_UP, 1, "gone")),
    # Cut by the log's truncation, or written by an older version still: the marks tell.
    ([sending(4), failed(4, "http 500")], NotificationState(S.PENDING, 5, "http 500")),
])
def test_the_state_an_older_log_tells(log, state):
    assert legacy_notification(log) == state


OLD_PUT_INVOCATION = (  # the invocation codec before schema version 5
    "INSERT INTO invocations (project, job_id, id, status, reason, scheduled_time, trigger,"
    " created_time, started_time, finished_time, attempt, event_count, log)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)


@pytest.fixture
def old_database(tmp_path, monkeypatch):
    """A database made by the version before: schema 4, one FAILED invocation whose
    notification's first attempt failed and whose second is due."""
    path = tmp_path / "old.db"
    with monkeypatch.context() as patch:
        patch.setattr(schema, "MIGRATIONS", schema.MIGRATIONS[:4])
        conn = sqlite3.connect(path, isolation_level=None)
        assert schema.migrate(conn) == 4
    log = [{"time": "2026-01-05T10:01:00.000Z", "message": "created", "trigger": "schedule"},
           ENQUEUED, sending(1), failed(1, "http 502")]
    conn.execute(OLD_PUT_INVOCATION, ("proj", "job", "inv-1", "FAILED", "http 500", START.timestamp(), "schedule",
                                      START.timestamp(), START.timestamp(), START.timestamp(), 1, 1,
                                      json.dumps(log)))
    conn.close()
    return path


def test_an_old_row_reads_its_state_from_its_log_and_its_next_write_stores_it(old_database):
    store = SqliteJobStore(old_database)
    row = store.get_invocation("proj", "job", "inv-1")
    assert row.notification == NotificationState(S.PENDING, 2, "http 502")
    requests = []
    job = StoredJob(new_record("proj", "job"), samples.definition("job"))
    notifications = Notifications(lambda body: store.run_in_transaction(body), lambda project, job_id: job,
                                  FakeClock(), lambda *request: requests.append(request) or DeliveryResult("succeeded"))

    def task(attempt: int) -> dict:
        return {"project": "proj", "job": "job", "attempt": attempt, "summary": {"invocation_id": "inv-1"}}

    notifications.run_task(task(1))  # late: its attempt failed before the upgrade
    assert requests == []
    notifications.run_task(task(2))
    assert [attempt for *_, attempt in requests] == [2]
    stored = store.connection().execute("SELECT notification FROM invocations WHERE id = 'inv-1'").fetchone()
    assert json.loads(stored[0]) == {"status": "sent", "attempt": 2, "reason": "http 502"}
    assert store.get_invocation("proj", "job", "inv-1").notification == NotificationState(S.SENT, 2, "http 502")


def test_a_new_row_stores_its_state_even_none_and_is_never_read_from_its_log(tmp_path):
    store = SqliteJobStore(tmp_path / "new.db")
    row = InvocationRow("proj", "job", "inv-1", "SUCCEEDED", START, "schedule", log=[ENQUEUED])
    store.run_in_transaction(lambda tx: tx.put_invocation(row))
    stored = store.connection().execute("SELECT notification FROM invocations").fetchone()
    assert stored == ("{}",)
    assert store.get_invocation(row.project, row.job_id, row.id) == row
