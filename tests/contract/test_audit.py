"""The audit log's storage, the same on every backend: entries committed with the action
they record (and only then), read newest first a page at a time for a project or one
job, and removed by age within a bound."""

from __future__ import annotations

from datetime import timedelta

import pytest

from engine import operations as ops
from engine.audit import Audit, new_entry
from engine.errors import Refused
from statemachine.machine import InvalidTransition
from statemachine.vocabulary import AuditAction
from tests.contract.samples import T0
from tests.contract.test_engine_scenarios import Scenario
from tests.contract.test_store_paging import all_pages


def _entry(minutes: int, job_id: str = "job", project: str = "proj", actor: str = "user:a@example.com"):
    audit = Audit(actor, AuditAction.PAUSE, {"reason": f"INC-{minutes}"})
    return new_entry(audit, project, job_id, T0 + timedelta(minutes=minutes))


def _write(store, *entries) -> None:
    def body(tx):
        for entry in entries:
            tx.put_audit(entry)
    store.run_in_transaction(body)


def test_a_projects_entries_newest_first_page_by_page(store):
    entries = [_entry(minute, job_id=f"job-{minute % 3}") for minute in range(7)]
    _write(store, *entries[:4])
    _write(store, *entries[4:], _entry(3, project="other"))
    newest_first = list(reversed(entries))
    seen, pages = all_pages(lambda size, token: store.list_audit("proj", None, size, token), 3)
    assert seen == newest_first and pages == 3  # whole entries: time, actor, action, detail
    assert store.list_audit("proj", None, 7, None)[1] is None  # exactly one full page: no token
    assert store.list_audit("nobody", None, 10, None) == ([], None)


def test_one_jobs_entries_newest_first_page_by_page(store):
    entries = [_entry(minute, job_id=f"job-{minute % 2}") for minute in range(8)]
    _write(store, *entries, _entry(9, project="other", job_id="job-0"))
    seen, pages = all_pages(lambda size, token: store.list_audit("proj", "job-0", size, token), 3)
    assert seen == [e for e in reversed(entries) if e.job_id == "job-0"] and pages == 2
    assert store.list_audit("proj", "job-9", 10, None) == ([], None)


def test_an_entry_in_a_transaction_that_fails_is_not_kept(store):
    def body(tx):
        tx.put_audit(_entry(1))
        raise RuntimeError("the action failed")

    with pytest.raises(RuntimeError):
        store.run_in_transaction(body)
    assert store.list_audit("proj", None, 10, None) == ([], None)


def test_entries_older_than_the_cutoff_go_a_bounded_batch_at_a_time(store):
    entries = [_entry(minute) for minute in range(5)]
    _write(store, *entries)
    cutoff = T0 + timedelta(minutes=3)  # minutes 0, 1, 2 are older
    assert store.delete_audit_before(cutoff, 2) == 2
    assert store.delete_audit_before(cutoff, 2) == 1
    assert store.delete_audit_before(cutoff, 2) == 0
    assert store.list_audit("proj", None, 10, None)[0] == [entries[4], entries[3]]


def test_actions_through_the_engine_commit_their_entries_and_refusals_none(backend):
    scenario = Scenario(backend)
    scenario.define()
    engine = scenario.engine

    def later():  # entries within one millisecond have no order among them
        scenario.clock.current += timedelta(seconds=1)
        return scenario.clock.current

    start = later()
    ops.pause(engine, "proj", "job", "INC-1234", actor="user:alice@example.com")
    assert engine.queries.job("proj", "job").record.paused_by == "user:alice@example.com"
    with pytest.raises((Refused, InvalidTransition)):  # a paused job refuses a trigger: no entry
        ops.trigger(engine, "proj", "job", actor="user:bob@example.com")
    later()
    ops.resume(engine, "proj", "job", actor="user:bob@example.com")
    later()
    ops.resume(engine, "proj", "job", actor="user:bob@example.com")  # not paused: nothing changed, no entry
    assert engine.queries.job("proj", "job").record.paused_by == ""
    later()
    row = ops.trigger(engine, "proj", "job", actor="user:carol@example.com")
    entries, _ = engine.queries.audit("proj", "job", 10, None)
    assert [(e.actor, e.action, e.detail) for e in entries] == [
        ("user:carol@example.com", "trigger", {"invocation": row.id}),
        ("user:bob@example.com", "resume", {}),
        ("user:alice@example.com", "pause", {"reason": "INC-1234"}),
    ]
    assert [e.time for e in entries] == [start + timedelta(seconds=s) for s in (3, 1, 0)]


def test_the_history_clean_up_removes_entries_as_old_as_the_history_it_removes(backend):
    scenario = Scenario(backend)
    now = scenario.clock.now()
    old = new_entry(Audit("local", AuditAction.DELETE), "proj", "gone", now - timedelta(days=46))
    young = new_entry(Audit("local", AuditAction.PUT, {"created": True}), "proj", "kept", now - timedelta(days=44))
    _write(backend.store, old, young)
    assert scenario.engine.maintenance.cleanup(timedelta(days=45)) == 1
    assert backend.store.list_audit("proj", None, 10, None) == ([young], None)
