"""`triggers` with a condition in the pure core: jobs named `on: failed` are started when
an invocation ends FAILED, those `on: finished` when it ends SUCCEEDED or FAILED, and a
plain id (`on: succeeded`) keeps its meaning. Explicit `now` throughout."""

from statemachine import actions as act
from statemachine import events as ev
from tests.unit.machine_helpers import Scenario, clock, occurrence_id


def _ended(job: Scenario, at: str, succeeded: bool) -> list:
    job.tick(at)
    invocation = occurrence_id(clock(at))
    return [action for action in job.run_through(invocation, at, succeeded=succeeded, reason="http 500")
            if isinstance(action, act.TriggerJobs)]


def test_a_failure_starts_the_jobs_named_on_failed_and_on_finished():
    job = Scenario()
    job.enable("10:07", triggers=("ok", "always"), triggers_on_failure=("alarm", "always"))
    assert _ended(job, "10:15", succeeded=False) == [
        act.TriggerJobs(("alarm", "always"), occurrence_id(clock("10:15")), clock("10:15"))]


def test_a_success_starts_only_the_jobs_named_on_succeeded_and_on_finished():
    job = Scenario()
    job.enable("10:07", triggers=("ok", "always"), triggers_on_failure=("alarm", "always"))
    assert _ended(job, "10:15", succeeded=True) == [
        act.TriggerJobs(("ok", "always"), occurrence_id(clock("10:15")), clock("10:15"))]


def test_an_aborted_invocation_starts_nothing():
    job = Scenario()
    job.enable("10:07", triggers=("ok",), triggers_on_failure=("alarm",))
    job.tick("10:15")
    actions = job.step(ev.Aborted("stop"), "10:16")
    assert not [action for action in actions if isinstance(action, act.TriggerJobs)]
