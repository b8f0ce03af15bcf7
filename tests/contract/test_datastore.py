"""What only the Datastore store has to show: contention that persists, storage
and queue failures, entities of other versions, the counters, the secret. On both
emulators: the Datastore emulator and Firestore's in Datastore mode."""

from __future__ import annotations

import json
import threading
import time
from datetime import timedelta

import pytest

from engine.adapters.cloud.datastore_limits import MAX_ENTITY_BYTES, MAX_PROPERTY_BYTES, EntityTooLarge
from engine.adapters.cloud.datastore_store import DatastoreJobStore
from engine.ports import ConflictError, ProjectRow, StoreError, Task
from statemachine.notification import NotificationState
from statemachine.vocabulary import NotificationStatus
from tests.contract import samples
from tests.contract.backends import DatastoreBackend, FirestoreBackend
from tests.contract.queues import EtaQueue
from tests.contract.samples import T0
from tests.support.emulators import DatastoreEmulator, datastore_indexes_xml, free_port


@pytest.fixture(params=["datastore", "firestore"])
def emulator(request):
    return request.getfixturevalue(request.param)


@pytest.fixture
def backend(request, emulator):
    kind = FirestoreBackend if request.node.callspec.params["emulator"] == "firestore" else DatastoreBackend
    made = kind(emulator, retries=2)
    yield made
    made.close()


@pytest.fixture
def raw(emulator, monkeypatch):
    """A plain google-cloud-datastore client: writes entities the way another version might."""
    from google.cloud import datastore as gds

    monkeypatch.setenv("DATASTORE_EMULATOR_HOST", emulator.host)
    return gds.Client(project="sundial-test")


def tick(name: str, eta=T0) -> Task:
    return Task(name, "tick", {"project": "proj", "job": "job", "nonce": name}, eta)


def test_contention_that_persists_is_a_conflict_error_and_leaves_nothing(datastore, monkeypatch):
    # On the Datastore emulator (optimistic): Firestore's locks make a write from
    # elsewhere wait instead, which the lock timeout test below shows.
    backend = DatastoreBackend(datastore, retries=2)
    # ndb waits up to 1 s, 2 s, 4 s between runs; the waits are not what this tests.
    monkeypatch.setattr("google.cloud.ndb._retry._DEFAULT_INITIAL_DELAY", 0.01)
    backend.store.run_in_transaction(lambda tx: tx.put_job(samples.job()))
    runs = []

    def body(tx):
        runs.append(1)
        tx.get_job("proj", "job")
        backend.interfere("proj", "job")  # every run loses its race
        tx.put_project(ProjectRow("proj", "written"))
        tx.enqueue(tick("never"))

    with pytest.raises(ConflictError):
        backend.store.run_in_transaction(body)
    assert len(runs) == 3  # the first run and `retries` more
    assert backend.store.get_project("proj") is None
    assert backend.queue.sent == []
    assert backend.store.counters["retries"] == 2


def test_a_lock_held_past_firestores_lock_timeout_is_a_conflict_error_and_leaves_nothing(firestore):
    """Firestore locks what a transaction read; a transaction that waits for such a lock
    longer than the emulator's lock timeout (about 2 s) fails with 409 "Transaction
    lock timeout" (ABORTED): the port's ConflictError, nothing written, nothing sent."""
    backend = FirestoreBackend(firestore, retries=0)
    backend.store.run_in_transaction(lambda tx: tx.put_job(samples.job()))
    holding, release = threading.Event(), threading.Event()

    def hold(tx):
        tx.get_job("proj", "job")
        holding.set()
        release.wait(10)

    holder = threading.Thread(target=backend.store.run_in_transaction, args=(hold,))
    holder.start()
    try:
        assert holding.wait(10)

        def write(tx):
            job = tx.get_job("proj", "job")
            job.config_error = "written"
            tx.put_job(job)
            tx.enqueue(tick("never"))

        began = time.monotonic()
        with pytest.raises(ConflictError, match="lock timeout"):
            backend.store.run_in_transaction(write)
        assert time.monotonic() - began < 9  # the emulator gave up, not our release
    finally:
        release.set()
        holder.join(30)
    assert backend.store.get_job("proj", "job").config_error == samples.job().config_error
    assert backend.queue.sent == []


def test_storage_that_does_not_answer_is_a_store_error(datastore):
    dead = DatastoreEmulator()
    dead.port = free_port()  # nothing listens there
    store = DatastoreJobStore(dead.client(), EtaQueue(), retries=0)
    with pytest.raises(StoreError) as raised:
        store.run_in_transaction(lambda tx: tx.get_job("proj", "job"))
    assert not isinstance(raised.value, ConflictError)


def test_a_queue_failing_after_the_commit_keeps_the_commit(backend):
    backend.queue.fail_next = 1

    def body(tx):
        tx.put_job(samples.job())
        tx.enqueue(tick("t"))
        return "committed"

    assert backend.store.run_in_transaction(body) == "committed"  # nothing raised
    assert backend.store.get_job("proj", "job") == samples.job()
    assert backend.queue.sent == []
    assert backend.store.counters["enqueue_failures"] == 1 and backend.store.counters["enqueues"] == 0


def test_listeners_hear_the_earliest_eta_after_the_commit(backend):
    heard = []
    store = DatastoreJobStore(backend.store.client, backend.queue, on_enqueue=heard.append)

    def body(tx):
        tx.enqueue(tick("late", T0 + timedelta(minutes=1)))
        tx.enqueue(tick("early", T0))
        assert heard == []

    store.run_in_transaction(body)
    assert heard == [T0]


def test_entities_of_an_older_version_load_with_defaults_not_stale_values(backend, raw):
    store = backend.store
    full = samples.invocation(T0, status="FAILED")
    project = ProjectRow("proj", "h1", "broken", ["e"], {"acl": {"owners": ["user:a@x"]}})
    store.run_in_transaction(lambda tx: (tx.put_invocation(full), tx.put_project(project)))
    assert store.get_invocation("proj", "job", full.id) == full

    # Another version rewrites both with fewer properties (and one we do not know).
    job_key = raw.key("Job", "proj/job")
    old = raw.entity(raw.key("Invocation", full.id, parent=job_key))
    old.update({"status": "SUCCEEDED", "obsolete": "x"})
    old_project = raw.entity(raw.key("Project", "proj"))
    old_project.update({"config_hash": "h2"})
    raw.put_multi([old, old_project])

    loaded = store.get_invocation("proj", "job", full.id)
    assert (loaded.status, loaded.reason, loaded.attempt, loaded.event_count, loaded.log) == ("SUCCEEDED", "", 0, 1, [])
    assert loaded.scheduled_time == T0.replace(microsecond=T0.microsecond // 1000 * 1000)  # from the id (ms)
    assert (loaded.trigger, loaded.created_time, loaded.finished_time) == ("schedule", None, None)
    assert store.get_project("proj") == ProjectRow("proj", "h2")


def test_a_write_keeps_only_the_properties_this_version_declares(backend, raw):
    invocation_id = samples.invocation(T0).id
    job_key = raw.key("Job", "proj/job")
    old = raw.entity(raw.key("Invocation", invocation_id, parent=job_key))
    old.update({"status": "RUNNING", "obsolete": "x"})
    raw.put(old)

    def finish(tx):
        row = tx.get_invocation("proj", "job", invocation_id)
        row.status = "SUCCEEDED"
        tx.put_invocation(row)

    backend.store.run_in_transaction(finish)
    stored = raw.get(old.key)
    assert "obsolete" not in stored and stored["status"] == "SUCCEEDED"
    assert {"reason", "log", "attempt", "event_count", "created_time", "notification"} <= set(stored)


def test_an_invocation_of_an_older_version_reads_its_notification_from_its_log_once(backend, raw):
    invocation_id = samples.invocation(T0).id
    old = raw.entity(raw.key("Invocation", invocation_id, parent=raw.key("Job", "proj/job")),
                     exclude_from_indexes=("log",))
    log = [{"message": "on_failure: notification enqueued"},
           {"message": "on_failure attempt 1 sending", "on_failure": "sending", "notification_attempt": 1}]
    old.update({"status": "FAILED", "log": json.dumps(log)})
    raw.put(old)
    store = backend.store
    assert store.get_invocation("proj", "job", invocation_id).notification == NotificationState(
        NotificationStatus.SENDING, 1)

    def notified(tx):
        row = tx.get_invocation("proj", "job", invocation_id)
        row.notification = NotificationState(NotificationStatus.SENT, 1)
        tx.put_invocation(row)

    store.run_in_transaction(notified)
    assert json.loads(raw.get(old.key)["notification"]) == {"status": "sent", "attempt": 1}
    assert store.get_invocation("proj", "job", invocation_id).notification.status is NotificationStatus.SENT


def test_counters_count_committed_writes_reads_and_enqueues(backend):
    store = backend.store
    row = samples.invocation(T0)
    store.run_in_transaction(lambda tx: (tx.put_job(samples.job()), tx.put_invocation(row), tx.enqueue(tick("t"))))
    assert store.reset_counters() == {
        "reads": 0, "lookups": 0, "queries": 0, "writes": 2, "enqueues": 1, "enqueue_failures": 0,
        "transactions": 1, "retries": 0, "largest_commit": 2,
    }

    def read_then_fail(tx):
        tx.get_job("proj", "job")
        tx.get_invocation("proj", "job", row.id)
        tx.put_job(samples.job())
        raise KeyError("rolled back")

    with pytest.raises(KeyError):
        store.run_in_transaction(read_then_fail)
    store.list_invocations("proj", "job", 10, None)
    counted = store.reset_counters()
    assert (counted["reads"], counted["writes"], counted["transactions"], counted["queries"]) == (3, 0, 0, 1)
    assert (counted["lookups"], counted["largest_commit"]) == (2, 0)  # the two in the body, none committed


def test_the_shared_secret_is_made_once(backend):
    made = []

    def generate():
        made.append(f"secret-{len(made)}")
        return made[-1]

    assert backend.store.shared_secret(generate) == "secret-0"
    assert backend.store.shared_secret(generate) == "secret-0"
    assert made == ["secret-0"]


def test_meta_values_are_kept_beside_the_jobs_and_replaced(backend):
    assert backend.store.read_meta("ui_signout/abc") is None
    backend.store.write_meta("ui_signout/abc", "1")
    backend.store.write_meta("ui_signout/abc", "2")
    assert backend.store.read_meta("ui_signout/abc") == "2"
    assert backend.store.read_meta("ui_signout/other") is None


def test_the_emulator_gets_exactly_the_indexes_of_index_yaml(tmp_path):
    spec = tmp_path / "index.yaml"
    spec.write_text("indexes:\n- kind: A\n  ancestor: yes\n  properties:\n  - name: x\n"
                    "  - name: y\n    direction: desc\n")
    xml = datastore_indexes_xml(spec)
    assert '<datastore-index kind="A" ancestor="true">' in xml
    assert '<property name="y" direction="desc"/>' in xml and 'autoGenerate="false"' in xml


def test_a_job_marked_deleted_in_its_definition_reads_back_deleted_and_is_upgraded_on_write(backend, raw):
    store = backend.store
    live = samples.job()
    live.deleted = False
    store.run_in_transaction(lambda tx: tx.put_job(live))
    # As the version before `deleted` was a property wrote it: the mark inside the definition.
    old = raw.get(raw.key("Job", "proj/job"))
    del old["deleted"]
    old["definition"] = json.dumps({**live.definition.to_dict(), "deleted": True}, separators=(",", ":"))
    raw.put(old)

    loaded = store.get_job("proj", "job")
    assert loaded.deleted is True and loaded.definition == live.definition
    store.run_in_transaction(lambda tx: tx.put_job(tx.get_job("proj", "job")))
    stored = raw.get(old.key)
    assert stored["deleted"] is True and "deleted" not in json.loads(stored["definition"])


@pytest.mark.parametrize("padding, limit", [(MAX_PROPERTY_BYTES + 1, MAX_PROPERTY_BYTES),
                                            (MAX_PROPERTY_BYTES - 100, MAX_ENTITY_BYTES)])
def test_a_job_entity_over_productions_limit_is_refused_before_anything_is_written(backend, raw, padding, limit):
    """One property over 1,048,487 bytes, or an entity over 1,048,572 bytes with every
    property under that: the store refuses it itself, naming the job and the size,
    on both emulators (the Datastore emulator would have stored it)."""
    big = samples.job()
    big.config_error = "x" * padding

    def body(tx):
        tx.put_invocation(samples.invocation(T0))
        tx.put_job(big)
        tx.enqueue(tick("t"))

    with pytest.raises(EntityTooLarge) as refused:
        backend.store.run_in_transaction(body)
    error = refused.value
    assert isinstance(error, StoreError) and error.limit == limit and error.size > limit
    assert "job proj/job" in str(error) and f"{error.size:,} bytes" in str(error)
    assert backend.store.get_job("proj", "job") is None
    assert backend.store.get_invocation("proj", "job", samples.invocation(T0).id) is None
    assert backend.queue.sent == []
    if isinstance(backend, FirestoreBackend):
        return
    entity = raw.entity(raw.key("Job", "proj/job"), exclude_from_indexes=("config_error",))
    entity["config_error"] = big.config_error
    raw.put(entity)  # what the check is for: this emulator takes what production refuses
    assert len(raw.get(entity.key)["config_error"]) == padding


def test_the_measured_size_is_the_one_firestore_counts(firestore):
    """datastore_limits counts as the Firestore emulator does: an entity of exactly its
    limit (1 MiB) is stored, one byte more is refused, and ours is 4 bytes stricter."""
    from google.api_core.exceptions import InvalidArgument
    from google.cloud import ndb

    from engine.adapters.cloud.datastore_entities import job_entity
    from engine.adapters.cloud.datastore_limits import entity_size

    client = firestore.client()
    with client.context(cache_policy=False, global_cache_policy=False):
        entity = job_entity(samples.job())
        entity.config_error += "x" * (2**20 - entity_size(entity))
        assert entity_size(entity) == 2**20 == MAX_ENTITY_BYTES + 4
        entity.put()
        entity.config_error += "x"
        with pytest.raises(InvalidArgument, match="maximum entity size"):
            entity.put()
        assert len(ndb.Key("Job", "proj/job").get().config_error) == len(entity.config_error) - 1


def test_a_second_look_at_a_key_in_one_transaction_costs_no_read(backend):
    store = backend.store
    store.run_in_transaction(lambda tx: tx.put_job(samples.job()))
    store.reset_counters()
    store.run_in_transaction(lambda tx: [tx.get_job("proj", "job") for _ in range(3)])
    assert store.reset_counters()["reads"] == 1


def test_an_invocation_of_a_cron_job_costs_two_writes_one_enqueue_and_two_transactions(backend):
    """The cost model's figures (docs/COST.md): the tick writes the job, the result
    writes the invocation's row alone; the job learns of it at its next tick."""
    from tests.contract.test_engine_scenarios import Scenario
    from tests.engine.harness import START

    scenario = Scenario(backend)
    scenario.define(schedule="every 1m")
    scenario.run_until(START + timedelta(minutes=1, seconds=30))
    backend.store.reset_counters()
    scenario.run_until(START + timedelta(minutes=11, seconds=30))
    counted, delivered = backend.store.reset_counters(), len(scenario.target.requests) - 1
    assert delivered == 10
    assert (counted["writes"], counted["enqueues"], counted["transactions"]) == (2 * 10, 10, 2 * 10)
    assert counted["reads"] <= 6 * 10  # entity reads cost a third of a write each
