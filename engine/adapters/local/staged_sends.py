"""The pipeline's path for staged attempts (statemachine/staging.py): from the commit
that staged them, ahead of their time, to their answers.

    step thread: committed as starting, time T ahead
    -> a sender: each request rendered, encoded and its connection opened (one hand-off a batch)
    -> the stager holds them until T (stager.py)
    -> at T, on the stager's thread: the requests due then are checked together (their
       leases, their jobs as stored now in one read, the release mark: `_ready`, over
       engine/staged.py StagedChecks)
    -> the writer writes each right after its leases' last check (http_batch.py), reads
       its answer and turns it into a result on its own thread
    -> the record stage (pipeline.py), which also counts and logs it

Nothing at T waits for storage but the one read, and no request waits for a thread: a
thousand due at one instant leave as fast as their connections take them. Only a
redirect to follow goes to a sender, and a request its target cannot stage is sent the
unstaged way at its time.

Once the process stops sending (TaskRunner.stop_sending, at a stop signal) nothing held
is written: what the stager holds, what is being made ready, and what the writer's last
check refuses are each handed to `left_unsent`, to go back to their start tasks under
their invocation ids (pipeline.py); a redirect is not followed.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import partial
from typing import Callable

from engine.adapters.local.send_pool import SendPool
from engine.adapters.local.stager import Stager
from engine.adapters.local.tuning import DEFAULT_LOCAL_TUNING, LocalTuning
from engine.collector import BulkPause
from engine.delivery import Staged
from engine.holds import AttemptHolds
from engine.logs import log_event
from engine.ports import Clock, DeliveryResult, LeasedTask, StoredJob
from engine.staging_ports import BatchWriter
from engine.tasks import Sent, Stepped, TaskRunner
from statemachine.actions import Deliver
from statemachine.record import JobRecord

log = logging.getLogger("sundial.dispatcher")



@dataclass(frozen=True)
class StagingParts:
    """What the staged path takes from the composition root (app/bootstrap.py): the clock
    its requests wait on; the writer of the staged requests (Deliveries.batch_writer, given
    the send pool's hand-off; None: each is sent the unstaged way at its time); where this
    process stores its release marks (AttemptHolds; None: nowhere, only a test's choice);
    and the text the store wrote a record as (record_cache.written_text; None: the check
    at T decodes every job it reads)."""

    clock: Clock
    batch_writer: Callable[[Callable[[Callable[[], None]], None]], BatchWriter | None] | None = None
    holds: AttemptHolds | None = None
    written_text: Callable[[JobRecord], str | None] | None = None


@dataclass(eq=False)
class StagedSend:
    """One staged attempt's request, from its commit to its answer."""

    item: LeasedTask | None  # the task whose step staged it (None: a result's step did)
    job: StoredJob
    action: Deliver
    stepped: Stepped
    staged: Staged | None = None  # made ready ahead; None: its target cannot stage it
    written_at: float | None = None  # time.monotonic() right before its write
    record_text: str | None = None  # its job's record as the commit that staged it wrote it

    @property
    def due(self) -> datetime:
        assert self.action.send_at is not None, "a staged attempt has its time"
        return self.action.send_at


class StagedSends:
    def __init__(self, runner: TaskRunner, sends: SendPool, writer: BatchWriter | None, parts: StagingParts, *,
                 send: Callable[[LeasedTask | None, StoredJob, Deliver, Stepped], None],
                 deliver: Callable[[LeasedTask | None, Sent, datetime], None],
                 settle_part: Callable[[LeasedTask | None, BaseException | None], None],
                 task_until: Callable[[LeasedTask | None], float],
                 room_freed: Callable[[], None] = lambda: None,
                 left_unsent: Callable[[StoredJob, Deliver], None] = lambda job, action: None,
                 tuning: LocalTuning = DEFAULT_LOCAL_TUNING):
        """`writer`: the HTTP target's batch writer (None: every request is sent the
        unstaged way at its time); `send`: the pipeline's unstaged send; `deliver(item,
        sent, started)`: a result for the record stage, to be counted and logged there;
        `room_freed()`: a request went on hold, and no longer keeps a worker busy;
        `left_unsent(job, action)`: a request never written because the process stops.

        At most `tuning.most_held` requests are held (beyond, the dispatcher leases no
        more early ticks and a result's step stages nothing further); from
        `tuning.instant_requests` due at one instant the collector (engine/collector.py)
        waits until they are all written, as a pass would hold the writer up and walk
        every request held."""
        self._tuning = tuning
        self.runner, self._sends, self._writer = runner, sends, writer
        self._send, self._deliver, self._settle_part = send, deliver, settle_part
        self._left_unsent = left_unsent
        self._task_until, self._room_freed = task_until, room_freed
        self.clock = parts.clock
        holds = parts.holds
        self._stager = Stager(self.clock, self._release,
                              release_up_to=holds.release_up_to if holds is not None else None, tuning=tuning)
        # At their time, the staged jobs are read back without decoding when nothing changed them.
        self._written_text = parts.written_text
        self._preparing = 0  # batches being made ready (stop() waits for them)
        self._releasing = 0  # requests of the instant being released, not yet handed to the writer
        self._held_for_tasks = 0  # of the requests on hold, those a task's step staged
        self._closed = False  # stopping: nothing more goes on hold
        self._collector = BulkPause()  # paused from an instant's release to its last write
        self._prepared = threading.Condition()

    def start(self) -> None:
        self._stager.start()

    def held_for_tasks(self) -> int:
        """Requests on hold that a task's step staged (the others belong to no task)."""
        return self._held_for_tasks

    def has_room(self) -> bool:
        """Whether one more request may go on hold (none once stopping)."""
        return not self._closed and self._stager.held() < self._tuning.most_held

    def writes_done(self) -> None:
        """What was due has been written: a collector paused for an instant goes on,
        unless the requests of an instant are being released now (the record stage may
        say so of an earlier one at any moment)."""
        if self._collector.paused and self.unwritten() == 0:
            self._collector.update(False, time.monotonic())

    def unwritten(self) -> int:
        """Requests due now and not yet handed to the writer (being checked, or about to be)."""
        return self._releasing + (1 if self._stager.due() else 0)

    def submit(self, staged: list[StagedSend]) -> None:
        """Staged attempts just committed, to be made ready and held until their time."""
        if not staged:
            return
        if self._written_text is not None:
            for one in staged:
                one.record_text = self._written_text(one.job.record)
        with self._prepared:
            if self._closed:  # committed as staged while the pipeline stopped: never let out
                self._unsent(staged)
                return
            if self._writer is not None:
                self._preparing += 1
        if self._writer is None:
            self._hold(staged)
            return
        self._sends.submit(self._prepare, staged)

    def stop(self, until: float | None = None) -> None:
        """Hold nothing more and let nothing held go: it is handed to `left_unsent` (call
        TaskRunner.stop_sending first, so that no write begins meanwhile; stop the writer
        after this). Waits for batches being made ready and a release under way until
        time.monotonic() reads `until` (None: however long they take)."""
        with self._prepared:
            self._closed = True
            while self._preparing and (until is None or time.monotonic() < until):
                self._prepared.wait(None if until is None else max(until - time.monotonic(), 0.001))
        held = self._stager.shutdown(until)
        with self._prepared:
            self._held_for_tasks -= sum(1 for one in held if one.item is not None)
        self._unsent(held)
        if self._collector.paused:  # stopping: whatever is left unwritten, no pause outlives this
            self._collector.update(False, time.monotonic())

    def _unsent(self, staged: list[StagedSend]) -> None:
        for one in staged:
            self._left_unsent(one.job, one.action)

    def _prepare(self, staged: list[StagedSend]) -> None:
        """On a sender, ahead of their time: each request encoded and a connection opened;
        one that cannot be made ready is sent the unstaged way at its time."""
        try:
            if self._closed:  # stopping: it would never be let out
                self._unsent(staged)
                return
            for one in staged:
                try:
                    one.staged = self.runner.deliveries.stage(one.job, one.action)
                except Exception as error:  # a bug of ours: deliver() at the time has its own handling
                    log_event(log, "staging a request failed", level=logging.ERROR, error=repr(error))
            self._hold(staged)
            # Connections last: on hold, the requests no longer keep the dispatcher from
            # staging more while a slow host takes its time to accept.
            for one in staged:
                if one.staged is not None and not self._closed:
                    one.staged.ready.warm()
        finally:
            with self._prepared:
                self._preparing -= 1
                self._prepared.notify_all()

    def _hold(self, staged: list[StagedSend]) -> None:
        for_tasks = sum(1 for one in staged if one.item is not None)
        with self._prepared:
            self._held_for_tasks += for_tasks
        refused = self._stager.submit([(one.due, one) for one in staged])  # (all, once it is shut down)
        if refused:
            with self._prepared:
                self._held_for_tasks -= sum(1 for one in refused if one.item is not None)
            self._unsent(refused)
        if for_tasks:  # only a task's request kept a worker busy until now
            self._room_freed()

    def _release(self, due: list[StagedSend]) -> None:
        """At their time, on the stager's thread: the requests due now, checked together."""
        with self._prepared:
            self._held_for_tasks -= sum(1 for one in due if one.item is not None)
        for one in due:
            if one.staged is None:
                self._sends.submit(self._send, one.item, one.job, one.action, one.stepped)
        ready = [one for one in due if one.staged is not None]
        self._releasing = len(ready)  # first: writes_done() then waits for these too
        if len(ready) >= self._tuning.instant_requests:
            self._collector.update(True, time.monotonic())  # until writes_done()
        try:  # in parts, so that the first requests leave while the later ones are checked
            part = self._tuning.release_part  # one read of their jobs each
            for start in range(0, len(ready), part):
                self._check_and_write(ready[start:start + part])
                self._releasing = max(len(ready) - start - part, 0)
        finally:
            self._releasing = 0

    def _check_and_write(self, ready: list[StagedSend]) -> None:
        try:
            go = self._ready(ready)
        except Exception as error:  # storage: the task is handed back, the watchdog has the attempt
            for one in ready:
                self._settle_part(one.item, error)
            return
        outgoing = []
        for one, ok in zip(ready, go):
            if not ok:
                if self.runner.sending_stopped:
                    self._left_unsent(one.job, one.action)
                self._settle_part(one.item, None)  # given up (_ready said why)
                continue
            assert one.staged is not None
            outgoing.append(one.staged.ready.outgoing(ready=partial(self._fence, one),
                                                      done=partial(self._written, one)))
        assert self._writer is not None, "a request is made ready only where there is a writer"
        self._writer.submit(outgoing)

    def _ready(self, ready: list[StagedSend]) -> list[bool]:
        """send_held's checks for the requests due at one instant, which the writer writes
        right after, each behind the fence (`_fence`): every lease, then the jobs as stored
        now in one read, and the release mark (StagedChecks.wanted). A False is given up here."""
        checks = self.runner.staged
        assert checks is not None, "only a runner that stages has staged requests"
        lost = [self.runner.lost_lease(one.stepped, self._task_until(one.item)) for one in ready]
        for one, why in zip(ready, lost):
            if why:
                self.runner.give_up_send(why, one.job, one.action)
        leased = [one for one, why in zip(ready, lost) if not why]
        wanted = iter(checks.wanted([(one.job, one.action) for one in leased], _known(leased)))
        return [not why and next(wanted) for why in lost]

    def _fence(self, one: StagedSend) -> bool:
        """On the writer's thread, right before the write: do its leases still hold?"""
        lost = self.runner.lost_lease(one.stepped, self._task_until(one.item))
        if lost:
            self.runner.give_up_send(lost, one.job, one.action)
            return False
        one.written_at = time.monotonic()
        return True

    def _written(self, one: StagedSend, outcome: object) -> None:
        """On the writer's thread: the writer's Answer, an error, or None (not written)."""
        if outcome is None or one.written_at is None:
            if one.written_at is None and self.runner.sending_stopped:  # its last check refused it
                self._left_unsent(one.job, one.action)
            self._settle_part(one.item, None)
            return
        assert one.staged is not None
        try:
            result = one.staged.ready.answered(outcome, one.written_at)
        except Exception as error:
            self._settle_part(one.item, error)
            return
        if result is None:  # a redirect: followed on a sender, blocking
            self._sends.submit(self._finish, one, outcome)
            return
        self._done(one, result)

    def _finish(self, one: StagedSend, outcome: object) -> None:
        assert one.staged is not None and one.written_at is not None
        if self.runner.sending_stopped:  # a redirect is a new request: its attempt is left in flight
            self._settle_part(one.item, RuntimeError("stopping: the redirect was not followed"))
            return
        try:
            result = one.staged.ready.finish(outcome, one.written_at)
        except Exception as error:
            self._settle_part(one.item, error)
            return
        self._done(one, result)

    def _done(self, one: StagedSend, result: DeliveryResult) -> None:
        assert one.staged is not None and one.written_at is not None
        started = self.clock.now() - timedelta(seconds=time.monotonic() - one.written_at)
        self._deliver(one.item, Sent(one.job, one.action, one.staged.recorded(result)), started)


def _known(staged: list[StagedSend]) -> dict[tuple[str, str], tuple[StoredJob, str]]:
    """The jobs as staged, with the text their staging commit wrote (JobsReader.get_jobs)."""
    return {(one.job.record.project, one.job.record.job_id): (one.job, one.record_text)
            for one in staged if one.record_text is not None}
