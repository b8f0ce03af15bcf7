"""Steps whose writes grow with the data stay within one commit's budget
(statemachine/budget.py) on the embedded store, which refuses a larger transaction
as legacy Datastore would: a fan-out's completion report, a config import of many
jobs, and a backfill of more runs than a commit takes that the job would let start at once."""

from __future__ import annotations

from datetime import timedelta

import pytest

from engine import operations
from engine.backfills import backfill_job
from engine.config_import import JobSnapshot, ProjectSnapshot
from engine.ports import DeliveryResult
from statemachine.budget import COMMIT_ENTITY_LIMIT, STARTS_PER_STEP
from statemachine.definition import JobDefinition
from statemachine.policy import FanoutPolicy, JobPolicy, Overlap
from tests.engine.harness import Harness
from tests.support.cloud_stores import LONG_RUN


@pytest.fixture
def h(tmp_path):
    return Harness(tmp_path)


def test_one_completion_report_settles_more_events_than_one_commit_takes(h):
    count = COMMIT_ENTITY_LIMIT + 100
    h.define(schedule_text="triggered", fanout=FanoutPolicy(count=count))
    h.target.respond = lambda request: DeliveryResult("accepted")
    invocation = operations.trigger(h.engine, "proj", "job").id
    h.run_until(h.clock.current + timedelta(seconds=1))
    assert len(h.target.requests) == count
    token = h.engine.deliveries.completion_token(invocation)
    operations.complete(h.engine, "proj", "job", invocation, token, succeeded=True)
    h.run_until(h.clock.current + timedelta(seconds=10))  # the check of the events' rows
    row = h.engine.queries.invocation("proj", "job", invocation)
    assert (row.status, row.reason) == ("SUCCEEDED", "")


def test_a_config_import_of_many_jobs_writes_each_job_in_a_transaction_of_its_own(h):
    jobs = tuple(
        JobSnapshot(f"job-{i}", JobPolicy(schedule_text="0 * * * * ?", revision="r"),
                    JobDefinition(id=f"job-{i}", schedule="0 * * * * ?", target={"noop": {}}), False)
        for i in range(COMMIT_ENTITY_LIMIT + 100)
    )
    h.engine.configs.import_project(ProjectSnapshot("many", "v1", jobs=jobs))
    assert len(h.store.list_jobs("many")) == len(jobs)


def test_a_backfill_of_a_job_allowing_them_all_at_once_fits_each_commit(h):
    # Under `allow` with room for them all, starting them in the request's one step would
    # write more invocation rows than one commit takes; they start STARTS_PER_STEP at a time.
    count = COMMIT_ENTITY_LIMIT + 100
    h.define(schedule_text="every 1s", overlap=Overlap.ALLOW, max_concurrent=count)
    now = h.clock.now()
    done = backfill_job(h.engine, "proj", "job", now - timedelta(seconds=count), now)
    assert len(done.invocations) == count
    first = done.invocations[:STARTS_PER_STEP]
    assert [h.engine.queries.find_invocation("proj", "job", i) is not None for i in first] == [True] * len(first)
    if not LONG_RUN:
        return  # the rest (about 5 s): each end starts the next batch (tests/unit/test_backfill.py)
    h.run_until(h.clock.current + timedelta(seconds=5))
    backfilled = [i for i in h.target.invocations() if i in set(done.invocations)]
    assert sorted(backfilled) == sorted(done.invocations)  # every one, once
