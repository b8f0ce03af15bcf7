"""A task queue that came back from an outage empty (gcloud-tasks-emulator restarted):
the watchdog's `queue_lost` pass (engine/maintenance.py, WatchdogFired.queue_lost) arms
every pending tick again at once, at its own time, so the chains go on at their next fire
time; the ordinary watchdog waits until a tick is late by its grace (30 s)."""

from __future__ import annotations

from datetime import timedelta

from tests.engine.harness import START, Harness


def test_a_queue_lost_pass_rearms_ticks_not_yet_late_and_the_job_fires_on_time(tmp_path):
    h = Harness(tmp_path)
    h.define()  # every minute
    h.run_until(START + timedelta(minutes=1, seconds=5))
    h.queue.clear()  # the 10:02 tick is lost with the queue
    assert h.engine.maintenance.run_watchdog() == 0  # not late yet: the ordinary pass waits
    assert h.engine.maintenance.run_watchdog(queue_lost=True) == 1
    h.run_until(START + timedelta(minutes=2, seconds=1))
    times = [(r.scheduled_time, r.trigger) for r in h.invocations()]
    assert times == [(START + timedelta(minutes=m), "schedule") for m in (1, 2)]  # on time, not caught up


def test_a_queue_lost_pass_leaves_a_stale_copy_of_the_tick_harmless(tmp_path):
    h = Harness(tmp_path)
    h.define()
    h.run_until(START + timedelta(minutes=1, seconds=5))
    h.engine.maintenance.run_watchdog(queue_lost=True)  # the queue had kept its tick after all
    h.run_until(START + timedelta(minutes=3, seconds=1))
    assert [r.scheduled_time for r in h.invocations()] == [START + timedelta(minutes=m) for m in (1, 2, 3)]
