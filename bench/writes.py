"""The writes scenario: in-process, with the engine wired as in tests/engine/harness.py
(the real SQLite store and queue, a noop target), count the SQLite transactions and
rows each delivered invocation costs, and time the write lock.

(a) recurring jobs, a fake clock, tasks run inline on one thread: leased 100 at a
    time, finished ones deleted in the next lease transaction, as the dispatcher
    does; gives the engine's cost per invocation without HTTP or contention.
(b) one-off jobs due at one instant, run by the real threaded Dispatcher on the
    system clock: the engine's throughput without HTTP, and the write lock.
"""

from __future__ import annotations

import hashlib
import math
import sys
import threading
import time
from collections import Counter
from contextlib import contextmanager
from datetime import datetime, timedelta
from pathlib import Path

from bench.output import PROJECT, iso_z, line, ms, percentile
from bench.server_process import server_env


def _counting_classes():
    from engine.adapters.local.sqlite_queue import SqliteTaskQueue
    from engine.adapters.local.sqlite_store import SqliteJobStore

    class CountingStore(SqliteJobStore):
        """The real store; counts committed transactions by what opened them, and keeps
        every thread's connection so that `rows_written` can sum their total_changes."""

        # Callers that open a transaction of their own; an engine `apply` is named by its event.
        KINDS = {"lease_due": "lease", "complete": "complete", "retry": "retry", "renew": "renew",
                 "write": "write", "delete_invocations_before": "cleanup", "shared_secret": "secret"}

        def __init__(self, path, on_enqueue=None):
            self.commits: Counter = Counter()
            # Waiting: from asking for a transaction until BEGIN IMMEDIATE returned, which
            # includes queueing on the store's process-wide write lock. Holding: from then
            # until COMMIT returned.
            self.wait_s = 0.0
            self.hold_s = 0.0
            self.spent: Counter = Counter()  # seconds from asking for BEGIN to COMMIT done, by kind
            self.connections: list = []
            self._lock = threading.Lock()
            super().__init__(path, on_enqueue=on_enqueue)

        def connection(self):
            conn = getattr(self._local, "conn", None)
            if conn is None:
                conn = super().connection()
                with self._lock:
                    self.connections.append(conn)
            return conn

        def rows_written(self) -> int:
            with self._lock:
                return sum(conn.total_changes for conn in self.connections)

        @contextmanager
        def transaction(self):
            kind = self._caller()
            began = time.perf_counter()
            manager = super().transaction()
            tx = manager.__enter__()
            got = time.perf_counter()
            try:
                yield tx
            except BaseException:
                if not manager.__exit__(*sys.exc_info()):
                    raise
            else:
                manager.__exit__(None, None, None)
            done = time.perf_counter()
            with self._lock:  # reached only when the COMMIT succeeded
                self.commits[kind] += 1
                self.wait_s += got - began
                self.hold_s += done - got
                self.spent[kind] += done - began

        def _caller(self) -> str:
            """An engine change by its event (a change's `write` is its transaction), else
            the nearest caller that opens a transaction of its own."""
            frame, names = sys._getframe(2), []
            for _ in range(12):
                if frame is None:
                    break
                name, local = frame.f_code.co_name, frame.f_locals
                if name == "apply" and "event" in local:
                    return "apply:" + type(local["event"]).__name__
                if name == "apply_many" and local.get("changes"):
                    return "apply:" + type(local["changes"][0].event).__name__
                names.append(name)
                frame = frame.f_back
            return next((self.KINDS[name] for name in names if name in self.KINDS), "other")

    class CountingQueue(SqliteTaskQueue):
        """The real queue; counts the tasks its lease transactions hand out."""

        def __init__(self, store):
            super().__init__(store)
            self.leased = 0
            self._lock = threading.Lock()

        def lease_due(self, now, limit, lease, done=None, *more):
            leased = super().lease_due(now, limit, lease, done, *more)
            with self._lock:
                self.leased += len(leased)
            return leased

    return CountingStore, CountingQueue


class CountingNoop:
    def __init__(self):
        self.count = 0
        self.lock = threading.Lock()
        self.last = 0.0
        self.lateness: list[float] = []

    def deliver(self, request):
        from engine.ports import DeliveryResult

        now = time.time()
        with self.lock:
            self.count += 1
            self.last = now
            self.lateness.append(now - request.scheduled_time.timestamp())
        return DeliveryResult("succeeded", detail="noop")


def _engine(db: Path, clock, target, on_enqueue=None):
    from engine.service import build_engine
    from engine.targets import build_targets
    from statemachine.policy import Tuning

    store_class, queue_class = _counting_classes()
    store = store_class(db, on_enqueue)
    targets = build_targets("local")
    targets["noop"] = target
    engine = build_engine(store, targets, clock, Tuning(), secret=b"bench")
    return store, engine, queue_class(store)


def _import(engine, text: str) -> None:
    from app.importer import snapshot_of

    data = text.encode()
    snapshot = snapshot_of(PROJECT, Path(f"{PROJECT}.yaml"), data, hashlib.sha256(data).hexdigest(), "local")
    engine.configs.import_project(snapshot)


def _per_invocation(prefix: str, store, invocations: int, commits_before: Counter, rows_before: int) -> Counter:
    commits = store.commits - commits_before
    rows = store.rows_written() - rows_before
    total = sum(commits.values())
    line(f"{prefix} transactions per invocation", f"{total / invocations:.2f} "
         f"({total:,} commits for {invocations:,} invocations)")
    line(f"{prefix} rows written per invocation", f"{rows / invocations:.2f} ({rows:,} rows)")
    by_count = sorted(commits.items(), key=lambda kv: -kv[1])
    parts = ", ".join(f"{kind} {count / invocations:.2f}" for kind, count in by_count)
    line(f"{prefix} commits per invocation by kind", parts)
    return commits


def writes(args, workdir: Path) -> None:
    workdir.mkdir(parents=True, exist_ok=True)
    _inline(args, workdir)
    _threaded(args, workdir)


def _inline(args, workdir: Path) -> None:
    """(a) fake clock, tasks inline: recurring jobs, every second, for 60 simulated seconds."""
    from engine.adapters.local.dispatcher import InlineDispatcher
    from statemachine.durations import UTC

    class FakeClock:
        def __init__(self):
            self.current = datetime(2026, 1, 5, 10, 0, tzinfo=UTC)

        def now(self):
            return self.current

    n = min(args.jobs or 200, 2000)
    clock, target = FakeClock(), CountingNoop()
    store, engine, queue = _engine(workdir / "inline.db", clock, target)
    _import(engine, "jobs:\n" + "".join(
        f"  - id: w{i:05d}\n    schedule: \"* * * * * ?\"\n    target: {{noop: {{}}}}\n" for i in range(n)))
    dispatcher = InlineDispatcher(queue, engine.tasks.handle, clock)
    commits0, rows0 = Counter(store.commits), store.rows_written()
    store.spent.clear()
    until = clock.current + timedelta(seconds=60)
    done: list[int] = []
    wall0, cpu0 = time.perf_counter(), time.process_time()
    while True:
        # As the threaded dispatcher does: what finished is deleted by the next lease.
        leased = queue.lease_due(clock.current, 100, dispatcher.lease, done)
        done = [item.id for item in leased if dispatcher.run_task(item)]
        if leased:
            continue
        wake = queue.next_wake(clock.current)
        if wake is None or wake > until:
            break
        clock.current = max(clock.current, wake)
    wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    line("writes (a): setup", f"{n} jobs '* * * * * ?', noop target, fake clock, 60 s simulated, "
                             f"tasks leased 100 at a time and run inline, finished ones deleted by the next lease")
    line("writes (a): engine cost per invocation, 1 thread", f"{wall / target.count * 1000:.2f} ms wall, "
         f"{cpu / target.count * 1000:.2f} ms CPU = at most {target.count / wall:,.0f} invocations/s per core "
         f"(no HTTP, no lock contention)")
    commits = _per_invocation("writes (a):", store, target.count, commits0, rows0)
    in_tx = sum(store.spent.values())
    line("writes (a): time per invocation by transaction", ", ".join(
        f"{kind} {store.spent[kind] / target.count * 1000:.3f} ms ({store.spent[kind] / count * 1000:.3f}/tx)"
        for kind, count in sorted(commits.items(), key=lambda kv: -store.spent[kv[0]]))
        + f"; outside transactions {(wall - in_tx) / target.count * 1000:.3f} ms")


def _threaded(args, workdir: Path) -> None:
    """(b) the real threaded dispatcher and clock: a burst of one-off jobs, noop target."""
    from engine.adapters.local.dispatcher import Dispatcher, Wakeup
    from statemachine.durations import UTC

    class SystemClock:
        def now(self):
            return datetime.now(UTC)

    n = min(args.jobs or 3000, 10_000)
    target = CountingNoop()
    wakeup = Wakeup()
    store, engine, queue = _engine(workdir / "threaded.db", SystemClock(), target, wakeup.task_enqueued)
    fire_at = math.ceil(time.time() + 2 + n / 1000)
    stamp = iso_z(fire_at)
    began = time.time()
    _import(engine, "jobs:\n" + "".join(
        f"  - id: t{i:05d}\n    at: [\"{stamp}\"]\n    target: {{noop: {{}}}}\n" for i in range(n)))
    imported = time.time() - began
    workers = int(server_env(args).get("SUNDIAL_WORKERS", 32))
    dispatcher = Dispatcher(queue, engine.tasks, SystemClock(), wakeup, workers)
    commits0, rows0, leased0 = Counter(store.commits), store.rows_written(), queue.leased
    time.sleep(max(0.0, fire_at - time.time()))
    store.wait_s = store.hold_s = 0.0
    cpu0 = time.process_time()
    dispatcher.start()
    try:
        time.sleep(max(0.0, fire_at - time.time()))
        deadline = fire_at + 120
        while target.count < n and time.time() < deadline:
            time.sleep(0.05)
        # Let the dispatcher delete the last finished tasks (with its next lease), so
        # that their deletes are counted too.
        settle = time.time() + 5
        while queue.pending() and time.time() < settle:
            time.sleep(0.05)
    finally:
        cpu = time.process_time() - cpu0
        dispatcher.stop()
    drain = target.last - fire_at
    line("writes (b): setup", f"{n:,} one-off jobs at one instant, noop target, real Dispatcher "
                             f"({workers} workers), in-process; import took {imported:.1f} s "
                             f"({n / imported:,.0f} jobs/s, parse included)")
    line("writes (b): engine throughput without HTTP", f"{target.count / drain:,.0f} invocations/s "
         f"({target.count:,} in {drain:.2f} s; lateness p50 {ms(percentile(target.lateness, 0.5))}, "
         f"p99 {ms(percentile(target.lateness, 0.99))})")
    _per_invocation("writes (b):", store, target.count, commits0, rows0)
    commits = sum((store.commits - commits0).values())
    line("writes (b): SQLite write lock", f"held {store.hold_s / drain:.0%} of the burst's wall time; "
         f"mean hold {store.hold_s / commits * 1000:.2f} ms, mean wait for it (process lock + BEGIN IMMEDIATE) "
         f"{store.wait_s / commits * 1000:.2f} ms per transaction; process CPU {cpu / drain:.0%} of one core")
    leases = (store.commits - commits0)["lease"]
    if leases:
        tasks = queue.leased - leased0
        line("writes (b): tasks per lease transaction", f"{tasks / leases:.1f} "
             f"({tasks / target.count:.2f} tasks per invocation)")
