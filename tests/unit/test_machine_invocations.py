"""Attempts, retries, fan-out, async completion, deadlines and the watchdog."""

from datetime import timedelta

from statemachine import actions as act
from statemachine import events as ev
from statemachine.fanout_step import EventsCheckDue
from statemachine.policy import FanoutPolicy, RetryPolicy, compute_backoff
from tests.unit.machine_helpers import Scenario, clock, delivered, occurrence_id

T = clock("10:15")
INV = occurrence_id(T)


def _queued(**fields) -> Scenario:
    """The 10:15 occurrence has been created; its start task is in the queue.

    (Its tick came 20 ms early, so the start is due after it; a tick on time
    would have delivered at once.)
    """
    job = Scenario()
    job.enable("10:07", **fields)
    job.tick("10:14:59.980")
    return job


def test_duplicate_start_while_the_attempt_is_in_flight_delivers_once():
    job = _queued()
    assert len(job.step(ev.InvocationStarting(INV), "10:15:01")) == 1
    assert job.step(ev.InvocationStarting(INV), "10:15:02") == []


def test_start_redelivered_after_a_lost_attempt_delivers_again_under_the_same_id():
    job = _queued()
    job.step(ev.InvocationStarting(INV), "10:15:01")
    # The process died mid-delivery; the queue hands the task out again later.
    assert job.step(ev.InvocationStarting(INV), "10:17:30") == [
        act.Deliver(INV, T, "schedule", 0, 1, 1)
    ]


def test_failed_attempt_is_retried_with_backoff_under_the_same_id():
    retry = RetryPolicy(max_attempts=3, min_backoff=timedelta(seconds=10), max_backoff=timedelta(minutes=1))
    job = _queued(retry=retry)
    job.step(ev.InvocationStarting(INV), "10:15:01")
    now = clock("10:15:02")
    retry_at = now + compute_backoff(retry, 1, f"{INV}/0")
    assert job.step(ev.InvocationFinished(INV, False, "http 500"), now) == [
        act.RecordAttemptFailed(INV, 0, 1, "http 500", retry_at),
        act.EnqueueAttempt(INV, 0, 2, retry_at),
    ]
    assert job.state == "RUNNING"
    # The first attempt's result arriving again is stale now.
    assert job.step(ev.InvocationFinished(INV, False, "http 500"), now) == []
    assert job.step(ev.InvocationStarting(INV, 0, 2), retry_at) == [act.Deliver(INV, T, "schedule", 0, 1, 2)]
    assert job.step(ev.InvocationFinished(INV, True, "", 0, 2), retry_at) == [
        act.FinishInvocation(INV, "SUCCEEDED", "")
    ]


def test_the_last_failed_attempt_fails_the_invocation():
    job = _queued(retry=RetryPolicy(max_attempts=2, min_backoff=timedelta(seconds=1)))
    job.step(ev.InvocationStarting(INV), "10:15:01")
    job.step(ev.InvocationFinished(INV, False, "timeout"), "10:15:02")
    job.step(ev.InvocationStarting(INV, 0, 2), "10:15:05")
    assert job.step(ev.InvocationFinished(INV, False, "http 503", 0, 2), "10:15:06") == [
        act.RecordAttemptFailed(INV, 0, 2, "http 503", None),
        act.FinishInvocation(INV, "FAILED", "http 503"),
    ]


def test_no_retry_is_planned_past_the_invocation_deadline():
    retry = RetryPolicy(max_attempts=5, min_backoff=timedelta(minutes=10), max_backoff=timedelta(minutes=10))
    job = _queued(retry=retry, timeout=timedelta(minutes=3))
    job.step(ev.InvocationStarting(INV), "10:15:01")
    actions = job.step(ev.InvocationFinished(INV, False, "http 500"), "10:15:02")
    assert actions[-1] == act.FinishInvocation(INV, "FAILED", "http 500")


def test_backoff_grows_exponentially_within_its_bounds_and_is_deterministic():
    retry = RetryPolicy(max_attempts=10, min_backoff=timedelta(seconds=1), max_backoff=timedelta(seconds=30))
    for attempt, step in [(1, 1), (2, 2), (3, 4), (4, 8), (5, 16), (6, 30), (9, 30)]:
        wait = compute_backoff(retry, attempt, "inv/0")
        assert timedelta(seconds=step) <= wait <= min(timedelta(seconds=step * 1.5), retry.max_backoff)
        assert wait == compute_backoff(retry, attempt, "inv/0")
    assert compute_backoff(retry, 3, "a/0") != compute_backoff(retry, 3, "b/0")


def test_jitter_never_brings_a_retry_closer_than_min_backoff():
    # Seen from outside: a retry 146 ms after a failed answer under min_backoff 200ms,
    # when the jitter took up to half of the step away.
    retry = RetryPolicy(max_attempts=5, min_backoff=timedelta(milliseconds=200), max_backoff=timedelta(seconds=5))
    waits = [compute_backoff(retry, 1, f"inv-{n}/0") for n in range(2_000)]
    assert min(waits) >= timedelta(milliseconds=200)
    assert max(waits) <= timedelta(milliseconds=300) and len(set(waits)) > 1_000  # still spread


def test_async_attempt_waits_for_its_completion():
    job = _queued()
    job.step(ev.InvocationStarting(INV), "10:15:01")
    # Only the completion report or the deadline is left: the deadline's timer is armed.
    deadline = job.record.find_active(INV).deadline
    assert job.step(ev.InvocationStarted(INV), "10:15:02") == [act.ArmDeadline(INV, deadline)]
    assert job.state == "RUNNING"
    assert job.record.find_active(INV).expect_by is None
    assert job.step(ev.InvocationFinished(INV, False, "job crashed", attempt=None), "10:19") == [
        act.FinishInvocation(INV, "FAILED", "job crashed")
    ]
    assert job.step(ev.InvocationFinished(INV, True, attempt=None), "10:19") == []


def test_async_invocation_times_out_at_its_deadline():
    job = _queued(timeout=timedelta(minutes=5))
    job.step(ev.InvocationStarting(INV), "10:15:01")
    job.step(ev.InvocationStarted(INV), "10:15:02")
    assert job.record.watchdog_at == clock("10:19:59.980")  # admitted at 10:14:59.980, plus 5 minutes
    assert job.step(ev.WatchdogFired(), "10:20:01") == [act.FinishInvocation(INV, "FAILED", "timeout")]


def test_fanout_enqueues_staggered_events_and_finishes_when_all_are_done():
    job = Scenario()
    job.enable("10:07", fanout=FanoutPolicy(count=4, spread=timedelta(seconds=20)))
    actions = job.tick("10:15")
    assert actions[1:] == [
        act.StartInvocation(INV, T, "schedule", 4),
        *[act.EnqueueAttempt(INV, i, 1, T + timedelta(seconds=5 * i)) for i in range(4)],
        act.ArmDeadline(INV, job.record.find_active(INV).deadline),  # its events' steps never look at it
    ]
    for i in range(4):
        at = T + timedelta(seconds=5 * i)
        assert job.step(ev.InvocationStarting(INV, i, 1), at) == [act.Deliver(INV, T, "schedule", i, 4, 1)]
    # Each outcome asks for a check of them all; an event's failure is told in its own
    # row, not in the invocation's history record.
    check = [act.CheckEvents(INV, clock("10:15:33"))]
    assert job.step(ev.InvocationFinished(INV, True, "", 0, 1), "10:15:30") == check
    assert job.step(ev.InvocationFinished(INV, False, "http 500", 1, 1), "10:15:30") == check
    assert job.step(ev.InvocationFinished(INV, True, "", 3, 1), "10:15:30") == check
    assert job.step(EventsCheckDue(INV), "10:15:31") == []
    assert job.state == "RUNNING"
    job.step(ev.InvocationFinished(INV, True, "", 2, 1), "10:15:31")
    assert job.step(EventsCheckDue(INV), "10:15:32") == [
        act.FinishInvocation(INV, "FAILED", "1 of 4 events failed; first: http 500")
    ]


def test_watchdog_rearms_a_lost_tick_with_a_new_nonce():
    job = Scenario()
    job.enable("10:07")
    assert job.record.watchdog_at == clock("10:15:30")
    assert job.step(ev.WatchdogFired(), "10:15:10") == []  # not due yet
    # Re-armed for now, so that watchdog_at moves forward with it.
    assert job.step(ev.WatchdogFired(), "10:16") == [act.ScheduleTick(clock("10:16"), "1.2")]
    assert job.record.watchdog_at == clock("10:16:30")
    assert job.tick("10:16", nonce="1.1") == []  # the lost tick, if it ever comes, is stale
    actions = job.tick("10:16")
    assert actions == [act.ScheduleTick(clock("10:30"), "1.3"), *delivered(T, clock("10:16"))]


def test_watchdog_reissues_a_lost_start():
    job = _queued()
    assert job.record.watchdog_at == clock("10:16")
    assert job.step(ev.WatchdogFired(), "10:16:05") == [act.EnqueueAttempt(INV, 0, 1, clock("10:16:05"))]
    assert job.step(ev.InvocationStarting(INV), "10:16:06") == [act.Deliver(INV, T, "schedule", 0, 1, 1)]


def test_watchdog_fails_an_invocation_past_its_deadline():
    job = _queued(timeout=timedelta(seconds=30))
    job.step(ev.InvocationStarting(INV), "10:15:01")
    assert job.record.watchdog_at == clock("10:15:29.980")  # admitted at 10:14:59.980, plus 30 s
    assert job.step(ev.WatchdogFired(), "10:15:31")[:1] == [act.FinishInvocation(INV, "FAILED", "timeout")]
    assert job.state == "SCHEDULED"
    assert job.step(ev.InvocationFinished(INV, True), "10:15:40") == []


def test_a_start_after_the_deadline_fails_instead_of_delivering():
    job = _queued(timeout=timedelta(seconds=30))
    assert job.step(ev.InvocationStarting(INV), "10:16") == [act.FinishInvocation(INV, "FAILED", "timeout")]


def test_watchdog_does_nothing_on_a_healthy_job():
    job = _queued()
    before = job.record
    assert job.step(ev.WatchdogFired(), "10:15:30") == []
    assert job.record == before


def test_a_manual_invocation_runs_beside_nothing_and_leaves_the_tick_alone():
    job = Scenario()
    job.enable("10:07")
    now = clock("10:08")
    actions = job.step(ev.ManualTrigger("r"), now)
    assert actions[0].trigger == "manual"
    assert job.record.tick_nonce == "1.1"
    inv = actions[0].invocation_id
    assert job.run_through(inv, "10:09") == [act.FinishInvocation(inv, "SUCCEEDED", "")]
    assert delivered(T, T) == job.tick("10:15")[1:]
