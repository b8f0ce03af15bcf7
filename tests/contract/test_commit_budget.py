"""Every store refuses a transaction that writes more entities than one legacy
Datastore commit takes (statemachine/budget.py), before anything of it is written;
and answers which invocations exist in one batched read."""

from __future__ import annotations

from datetime import timedelta

import pytest

from engine.errors import CommitTooLarge
from statemachine.budget import COMMIT_ENTITY_LIMIT
from tests.contract import samples
from tests.contract.samples import T0


def rows(count: int, job_id: str = "job"):
    return [samples.invocation(T0 + timedelta(seconds=i), job_id=job_id) for i in range(count)]


def write(store, written) -> None:
    def body(tx):
        tx.put_job(samples.job())
        for row in written:
            tx.put_invocation(row)
    store.run_in_transaction(body)


def test_a_commit_of_more_entities_than_one_commit_takes_is_refused_and_writes_nothing(store):
    too_many = rows(COMMIT_ENTITY_LIMIT)  # with the job: one entity over the limit
    with pytest.raises(CommitTooLarge) as refused:
        write(store, too_many)
    message = str(refused.value)
    assert "proj/job" in message and f"{COMMIT_ENTITY_LIMIT + 1:,} entities" in message
    assert "nothing was written" in message
    assert store.get_job("proj", "job") is None
    assert store.get_invocation("proj", "job", too_many[0].id) is None
    assert store.get_invocation("proj", "job", too_many[-1].id) is None


def test_a_commit_of_exactly_the_limit_is_written(store):
    enough = rows(COMMIT_ENTITY_LIMIT - 1)
    write(store, enough)
    assert store.get_invocation("proj", "job", enough[-1].id) is not None


def test_an_entity_written_twice_in_one_transaction_counts_once(store):
    again = rows(COMMIT_ENTITY_LIMIT - 1)
    write(store, again + again)
    assert store.get_invocation("proj", "job", again[0].id) is not None


def test_existing_invocations_sees_stored_rows_and_the_transactions_own(store):
    stored, mine, absent = rows(3)
    write(store, [stored])

    def body(tx):
        tx.put_invocation(mine)
        return tx.existing_invocations("proj", "job", [stored.id, mine.id, absent.id])

    assert store.run_in_transaction(body) == {stored.id, mine.id}
    # Another job's row of the same id is not this job's.
    assert store.run_in_transaction(lambda tx: tx.existing_invocations("proj", "other", [stored.id])) == set()
