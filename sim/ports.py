"""The simulated ports: the in-memory store and queue with faults wrapped around their
commits and deliveries, and a target that answers in every way a real one can.

Faults are injected at the ports, never inside the engine: a commit fails before its
body runs, conflicts after it (rolled back), lands but reports an error, kills its
process before or after it lands, or stalls its process past its leases while other
processes run; a task is delivered late, early, twice, out of order, or again after
its lease ran out.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from enum import Enum
from typing import Callable, TypeVar

from engine.adapters.memory import MemoryJobStore, MemoryTables, MemoryTaskQueue
from engine.adapters.memory.tables import Writes
from engine.adapters.memory.transaction import MemoryTransaction
from engine.errors import ConflictError, StoreError
from engine.ports import DeliveryRequest, DeliveryResult, LeasedTask, Task, Transaction
from statemachine.vocabulary import DeliveryOutcome

T = TypeVar("T")


class SimCrash(BaseException):
    """The process died here. A BaseException, so that no `except Exception` of the
    engine's can swallow it: nothing after this point of the process runs."""


class Fault(Enum):
    NONE = "none"
    BEFORE = "before"  # storage unavailable: nothing written
    ROLLBACK = "rollback"  # the body ran, then a conflict: nothing written
    AFTER_COMMIT = "after-commit"  # written, but the caller gets an error
    CRASH_BEFORE = "crash-before"  # the process dies before the commit
    CRASH_AFTER = "crash-after"  # the process dies right after the commit landed
    STALL = "stall"  # the process stalls after the commit; others run meanwhile
    STALL_BEFORE = "stall-before"  # ... or before it, then commits what it had


@dataclass(frozen=True)
class FaultMix:
    """The probability of each fault, per commit, per task delivery and per send."""

    commit: tuple[tuple[Fault, float], ...] = (
        (Fault.BEFORE, 0.02), (Fault.ROLLBACK, 0.02), (Fault.AFTER_COMMIT, 0.02),
        (Fault.CRASH_BEFORE, 0.01), (Fault.CRASH_AFTER, 0.02), (Fault.STALL, 0.02),
        (Fault.STALL_BEFORE, 0.02))
    duplicate_task: float = 0.03  # a second delivery of a task, while the first one runs
    # ... carrying the retry count of the first, when that was itself a retry, as Cloud
    # Tasks' duplicates do (off: the runs before the engine stopped taking it for a
    # sign that the first delivery died; docs/RELIABILITY.md, "What it found").
    duplicate_keeps_retry: bool = True
    lost_ack: float = 0.03  # the handler's answer is lost: redelivered after its lease
    stall_in_send: float = 0.06  # the sending process stalls while its request is out
    late_task: float = 0.05  # a task enqueued later than its ETA says
    early_task: float = 0.02  # handed over before its ETA (inexact ETAs, clock skew)
    answers: tuple[tuple[str, float], ...] = (
        ("ok", 0.70), ("http 500", 0.08), ("refused", 0.05), ("timeout", 0.05), ("202", 0.08),
        ("202 twice", 0.02), ("202 never", 0.02))

    def kinds(self) -> tuple[str, ...]:
        """The names of the faults this mix injects (its probabilities above 0), in a
        fixed order: commit faults, then task and send faults, then the target's answers."""
        names = [fault.value for fault, chance in self.commit if chance > 0]
        names += [name.replace("_", "-") for name in _SCALARS if getattr(self, name) > 0]
        return tuple(names + [_answer_name(answer) for answer, chance in self.answers
                              if chance > 0 and answer != "ok"])

    def without(self, kind: str) -> FaultMix:
        """This mix with the fault `kind` (one of `kinds()`) never injected: a
        removed answer becomes a 200."""
        field_name = kind.replace("-", "_")
        if field_name in _SCALARS:
            return replace(self, **{field_name: 0.0})  # type: ignore[arg-type]  # (a float field)
        return replace(self, commit=tuple((fault, chance) for fault, chance in self.commit if fault.value != kind),
                       answers=tuple((answer, chance) for answer, chance in self.answers
                                     if _answer_name(answer) != kind))


_SCALARS = ("duplicate_task", "lost_ack", "stall_in_send", "late_task", "early_task")


def _answer_name(answer: str) -> str:
    return answer.replace(" ", "-")


def pick(rng: random.Random, choices: tuple[tuple[T, float], ...], default: T) -> T:
    """One of `choices` by its probability, else `default`."""
    roll = rng.random()
    for choice, chance in choices:
        if roll < chance:
            return choice
        roll -= chance
    return default


class FaultyStore(MemoryJobStore):
    """The in-memory store; each commit asks `fault()` what goes wrong with it, and
    hands what it wrote (and its job records' sizes) to `observe` (the invariants)
    once it landed, then lets
    `between` run what another process does between this commit and the next."""

    def __init__(self, tables: MemoryTables, queue: MemoryTaskQueue,
                 observe: Callable[[Writes, dict[tuple[str, str], int]], None]):
        super().__init__(tables, queue)
        self.observe = observe
        self.fault: Callable[[], Fault] = lambda: Fault.NONE
        self.on_stall: Callable[[], None] = lambda: None
        self.between: Callable[[], None] = lambda: None

    def run_in_transaction(self, body: Callable[[Transaction], T]) -> T:
        fault = self.fault()
        if fault is Fault.BEFORE:
            raise StoreError("sim: storage unavailable")
        if fault is Fault.CRASH_BEFORE:
            raise SimCrash("sim: crashed before a commit")
        if fault is Fault.STALL_BEFORE:
            self.on_stall()
        with self.tables.lock:
            tx = MemoryTransaction(self.tables)
            result = body(tx)
            if fault is Fault.ROLLBACK:
                raise ConflictError("sim: conflict, rolled back")
            sizes = self.tables.apply(tx.writes)
            for change in tx.writes.queue_changes:
                if isinstance(change, str):
                    self.queue.remove(change)
                else:
                    self.queue.add(change)
        self.observe(tx.writes, sizes)
        self.between()
        return self._after_commit(fault, result)

    def _after_commit(self, fault: Fault, result: T) -> T:
        if fault is Fault.AFTER_COMMIT:
            raise StoreError("sim: commit outcome unknown")
        if fault is Fault.CRASH_AFTER:
            raise SimCrash("sim: crashed after a commit")
        if fault is Fault.STALL:
            self.on_stall()
        return result


class SimQueue(MemoryTaskQueue):
    """The in-memory queue (Cloud Tasks' semantics), worse: `shift()` moves a task's
    ETA as it is enqueued (late or early), and `lease_any` hands over any due task,
    not the earliest (reordering)."""

    def __init__(self, throttle_limit: Callable[[str], int | None]):
        super().__init__(throttle_limit, marks_retries=True)
        self.shift: Callable[[Task], timedelta] = lambda task: timedelta(0)

    def add(self, task: Task) -> bool:
        by = self.shift(task)
        return super().add(replace(task, eta=task.eta + by) if by else task)

    def due_ids(self, now: datetime) -> list[int]:
        with self._lock:
            return sorted(task_id for task_id, queued in self._tasks.items()
                          if queued.eta <= now and queued.free_at(now))

    def lease_id(self, task_id: int, now: datetime, lease: timedelta) -> LeasedTask:
        with self._lock:
            return self._lease(task_id, self._tasks[task_id], now + lease)

    def copy_of(self, task_id: int) -> Task:
        """The task as a second, duplicate delivery would carry it."""
        with self._lock:
            queued = self._tasks[task_id]
            return replace(queued.task, eta=queued.eta)


@dataclass(frozen=True)
class Completion:
    """An async target's report, due at `at`."""

    at: datetime
    request: DeliveryRequest
    succeeded: bool


class SimTarget:
    """Answers as `answer()` says; `check(request)` runs first (the invariants);
    a 202 queues its completion report (once, twice, or never) in `completions`."""

    def __init__(self, rng: random.Random, mix: FaultMix, advance: Callable[[timedelta], None],
                 check: Callable[[DeliveryRequest], None], now: Callable[[], datetime],
                 answered: Callable[[DeliveryRequest, str], None]):
        self.rng, self.mix, self.advance, self.check, self.now = rng, mix, advance, check, now
        self.answered = answered
        self.stall: Callable[[], None] = lambda: None
        self.completions: list[Completion] = []
        self.sent = 0
        self.trace: Callable[[str], None] = lambda line: None

    def deliver(self, request: DeliveryRequest) -> DeliveryResult:
        self.check(request)
        self.sent += 1
        answer = pick(self.rng, self.mix.answers, "ok")
        self.answered(request, answer)
        self.trace(f"send {request.job_id} {request.invocation_id} #{request.attempt}: {answer}")
        if self.rng.random() < self.mix.stall_in_send:
            self.stall()  # the answer comes back to a process that was away past its leases
        if answer == "ok":
            return DeliveryResult(DeliveryOutcome.SUCCEEDED, detail="200")
        if answer == "timeout":
            self.advance(timedelta(seconds=10))
            return DeliveryResult(DeliveryOutcome.FAILED, reason="timeout")
        if answer in ("http 500", "refused"):
            return DeliveryResult(DeliveryOutcome.FAILED, reason=answer)
        self._complete_later(request, answer)
        return DeliveryResult(DeliveryOutcome.ACCEPTED, detail="202")

    def _complete_later(self, request: DeliveryRequest, answer: str) -> None:
        if answer == "202 never":
            return
        succeeded = self.rng.random() < 0.8
        for _ in range(2 if answer == "202 twice" else 1):
            at = self.now() + timedelta(seconds=self.rng.uniform(1, 120))
            self.completions.append(Completion(at, request, succeeded))
