"""How long a task the dispatcher hands back waits (engine/adapters/local/inline.py,
`hand_back`): a handler's bug backs off to a minute, storage trouble to two seconds, so
that a tick that failed all through a long disk-full runs again within two seconds of
space coming back, not up to a minute later."""

from __future__ import annotations

from datetime import datetime, timedelta

from engine.adapters.local.inline import hand_back
from engine.ports import ConflictError, LeasedTask, StoreError, Task
from statemachine.durations import UTC
from statemachine.vocabulary import TaskKind

NOW = datetime(2026, 11, 28, 12, 0, tzinfo=UTC)


class FixedClock:
    def now(self) -> datetime:
        return NOW


class RetriedAt:
    """Only what hand_back asks of the queue: when the task is to run again."""

    def __init__(self) -> None:
        self.eta: datetime | None = None

    def retry(self, task_id: int, eta: datetime, attempts: int | None = None) -> None:
        self.eta = eta


def _wait_after(error: BaseException, attempts: int) -> timedelta:
    queue = RetriedAt()
    item = LeasedTask(1, Task("tick-j", TaskKind.TICK, {}, NOW), attempts)
    hand_back(queue, FixedClock(), item, error)  # type: ignore[arg-type]
    assert queue.eta is not None
    return queue.eta - NOW


def test_a_task_failing_on_storage_is_tried_again_within_two_seconds_however_often_it_failed():
    assert _wait_after(StoreError("sqlite: database or disk is full"), 1) == timedelta(milliseconds=500)
    assert _wait_after(StoreError("sqlite: database or disk is full"), 8) == timedelta(seconds=2)
    assert _wait_after(ConflictError("lost a race"), 8) == timedelta(seconds=2)


def test_a_task_whose_handler_has_a_bug_still_backs_off_to_a_minute():
    assert _wait_after(ValueError("a bug"), 8) == timedelta(seconds=60)
