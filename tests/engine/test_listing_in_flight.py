"""An invocation whose request may have left is in the history the API and the UI list
(engine/queries.py), while its own row is not written yet: one started by its tick lives in
its job's record until its first attempt ends (StartInvocation.deferred), and the
contract says an invocation is written before any target hears of it."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from engine.ports import InvocationRow
from statemachine.ids import OCCURRENCE, invocation_id
from statemachine.policy import Tuning
from statemachine.record import ActiveInvocation
from tests.engine.harness import START, Harness

T = START + timedelta(minutes=1)


def _listed(h: Harness, page_size: int = 100, statuses: tuple[str, ...] = ()) -> list:
    """Every invocation the API lists, newest first, page by page."""
    rows, token = [], None
    while True:
        page, token = h.engine.queries.invocations("proj", "job", page_size, token, statuses)
        assert len(page) <= page_size
        rows += page
        if token is None:
            return rows


def _seen_while_in_flight(h: Harness, look) -> list:
    seen = []
    h.target.check = lambda request: seen.append((request.invocation_id, look()))
    return seen


@pytest.mark.parametrize("tuning, jitter", [
    (Tuning(), timedelta(0)),  # delivered right after its tick's commit
    (Tuning(stage_ahead=timedelta(seconds=1)), timedelta(milliseconds=900)),  # staged, sent at T + jitter
], ids=["inline", "staged"])
def test_the_request_at_the_target_is_listed_as_running(tmp_path, tuning, jitter):
    h = Harness(tmp_path, tuning)
    h.define(schedule_text="* * * * *", jitter=jitter)
    seen = _seen_while_in_flight(h, lambda: [(row.id, row.status) for row in _listed(h)])
    h.run_until(T + timedelta(seconds=2))
    ((invocation, listed),) = seen
    assert listed == [(invocation, "RUNNING")]
    (row,) = _listed(h)  # and once it has ended, its own row, once
    assert (row.id, row.status) == (invocation, "SUCCEEDED")


def test_the_job_views_show_it_as_the_last_invocation_too(tmp_path):
    h = Harness(tmp_path)
    h.define(schedule_text="* * * * *")

    def look():
        job = h.engine.queries.job("proj", "job")
        last = h.engine.queries.last_invocation(job)
        recent = h.engine.queries.recent_invocations([job], 5)["job"]
        return last.id, [row.id for row in recent], recent[0].log
    seen = _seen_while_in_flight(h, look)
    h.run_until(T + timedelta(seconds=2))
    ((invocation, (last, recent, log)),) = seen
    assert last == invocation and recent == [invocation] and log == []  # the strip reads no logs


def test_paging_and_status_filters_place_it_among_the_rows(tmp_path):
    h = Harness(tmp_path)
    h.define(schedule_text="* * * * *")
    h.run_until(START + timedelta(minutes=5, seconds=5))  # five occurrences ended, with rows
    seen = _seen_while_in_flight(h, lambda: {
        "pages": [row.id for row in _listed(h, page_size=2)],
        "first": [row.id for row in _listed(h, page_size=1)][:1],
        "running": [row.id for row in _listed(h, page_size=2, statuses=("RUNNING",))],
        "succeeded": [row.id for row in _listed(h, page_size=2, statuses=("SUCCEEDED",))],
    })
    h.run_until(START + timedelta(minutes=6, seconds=5))
    ((invocation, views),) = seen
    newest_first = [row.id for row in reversed(h.invocations())]
    assert len(newest_first) == 6 and newest_first[0] == invocation
    assert views["pages"] == newest_first  # each once, in its place, on pages of two
    assert views["first"] == [invocation]
    assert views["running"] == [invocation]
    assert views["succeeded"] == newest_first[1:]


def test_a_finish_left_in_its_row_is_listed_once_with_its_outcome(tmp_path):
    h = Harness(tmp_path, defer_finishes=True)
    h.define(schedule_text="* * * * *")
    h.run_until(T + timedelta(seconds=5))
    (row,) = h.invocations()
    assert [e.invocation_id for e in h.store.get_job("proj", "job").record.active] == [row.id]  # deferred
    assert [(r.id, r.status) for r in _listed(h)] == [(row.id, "SUCCEEDED")]
    assert _listed(h, statuses=("RUNNING", "STARTING")) == []


def test_an_older_invocation_in_flight_is_placed_among_newer_rows_on_every_page_size(tmp_path):
    h = Harness(tmp_path)
    h.define(schedule_text="triggered")
    times = [START + timedelta(minutes=m) for m in range(1, 6)]
    ids_ = [invocation_id("proj", "job", at, OCCURRENCE) for at in times]
    in_flight = ActiveInvocation(ids_[2], times[2], "schedule", deadline=times[2] + timedelta(hours=1),
                                 started_mask=1, started_at=times[2], epoch=1)

    def write(tx):
        for invocation, at in zip(ids_, times):
            if invocation != in_flight.invocation_id:
                tx.put_invocation(InvocationRow("proj", "job", invocation, "SUCCEEDED", at, "schedule",
                                                created_time=at, finished_time=at))
        stored = tx.get_job("proj", "job")
        tx.put_job(replace(stored, record=replace(stored.record, active=(in_flight,))))
    h.store.run_in_transaction(write)
    h.clock.current = times[-1] + timedelta(minutes=1)  # past them all: the one in flight was sent, not staged
    newest_first = sorted(ids_)
    for size in range(1, 7):
        assert [row.id for row in _listed(h, page_size=size)] == newest_first, size
        assert [row.id for row in _listed(h, size, ("SUCCEEDED",))] == [i for i in newest_first if i != ids_[2]]
        assert [row.id for row in _listed(h, size, ("RUNNING", "FAILED"))] == [ids_[2]]
    job = h.engine.queries.job("proj", "job")
    for count in range(1, 6):
        assert [row.id for row in h.engine.queries.recent_invocations([job], count)["job"]] == newest_first[:count]
