"""A job written by many requests at once: changes past its writers get 429 with
Retry-After at once (never a wait on the record's lock), and a trigger is accepted
into the job's inbox and started by its inbox task (engine/inbox.py, engine/writers.py)."""

from __future__ import annotations

from contextlib import ExitStack

from tests.web.conftest import error_of, noop_job


def _hold_every_writer(api, stack: ExitStack, job: str = "j") -> None:
    """Stand in for requests still writing the job: take every writer's place."""
    for _ in range(api.engine.writers.limit):
        stack.enter_context(api.engine.writers.admit("demo", job))


def test_a_change_past_the_jobs_writers_gets_429_with_retry_after_and_changes_nothing(api):
    api.put("j", noop_job(schedule="every 1m"))
    with ExitStack() as stack:
        _hold_every_writer(api, stack)
        refused = api.post("j", ":pause", {"reason": "x"})
        assert error_of(refused) == (429, "RESOURCE_EXHAUSTED")
        assert refused.headers["Retry-After"] == "1"
        assert api.job("j")["paused"] is False
        assert api.put("j", noop_job(schedule="every 2m")).status_code == 429
    assert api.post("j", ":pause").status_code == 200  # the places are free again


def test_a_trigger_while_the_job_is_written_is_accepted_and_its_inbox_task_starts_it(api):
    api.put("j", noop_job(schedule="triggered"))
    with ExitStack() as stack:
        _hold_every_writer(api, stack)
        accepted = api.post("j", ":trigger")
    assert accepted.status_code == 200
    invocation = accepted.get_json()
    assert (invocation["status"], invocation["reason"], invocation["trigger"]) == ("STARTING", "accepted", "manual")
    assert api.history("j") == []  # not started yet: the job's record was not written
    api.until(2)
    assert [(h["id"], h["status"]) for h in api.history("j")] == [(invocation["id"], "SUCCEEDED")]
    assert len(api.delivered("j")) == 1


def test_a_trigger_with_no_other_writer_is_started_in_the_request_as_before(api):
    api.put("j", noop_job(schedule="triggered"))
    invocation = api.post("j", ":trigger").get_json()
    assert invocation["reason"] != "accepted"
    assert [h["id"] for h in api.history("j")] == [invocation["id"]]
