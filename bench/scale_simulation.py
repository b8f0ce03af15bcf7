"""A discrete-event simulation of a million jobs on Google Cloud: how late they start, and
what a month of them costs, with the chain spread over N Cloud Tasks queues.

    python bench/scale_simulation.py [--jobs 1000000] [--shards 1,8,64]

No I/O: a heap of events, and the limits of the services as parameters (`Limits`, each
with where it comes from; docs/SCALE.md explains them and the model). One hour is
simulated, for jobs that run hourly, all due at :00 ("aligned"), or spread evenly over
the hour ("spread"). For each due task:

1. Cloud Tasks dispatches it from its job's shard (statemachine/shards.py: the same hash
   the product uses) at its ETA, as that queue's token bucket allows (500 dispatches/s,
   `burst` tokens at most) and while fewer than `queue_concurrency` of the queue's
   tasks are in flight (a task is in flight until its handler answers).
2. App Engine runs the handler on an instance slot; with none free the request waits,
   and the autoscaler starts instances (ready `cold_start` seconds later).
3. The handler commits the tick's transaction (which waits for the database's write
   capacity when it has a ceiling), creates the next tick, and sends the request: the
   job's lateness is that moment minus its due time. Then the target answers, the
   result is committed, the slot is free and the queue's in-flight count drops.

With `hot_index` set, every write into an index of a time (Firestore: ~500 a second
into one range of such an index) waits for its range: the job's watchdog time (written
by the tick's and by the result's transaction) and the invocation's retention time. In
the layout before (`sharded_times` 0) each is one range, and the tick writes both (the
invocation's `created_time` was indexed from its creation); in the sharded layout
(engine/adapters/cloud/datastore_entities.py) each is `sharded_times` ranges, the job's
range fixed by the same kind of hash, and the tick writes only the job's.

With `cold_group`, every dispatch and every creation of a next tick also takes its turn
in its queue group's budget under Cloud Tasks' ramp for cold groups (bench/queue_groups.py:
one group for today's consecutive shard names, one a queue with `scattered`);
`creates_ahead` leaves the next tick's creation out of the burst. With `pending_limit`,
a request that waited longer for an instance is given up by App Engine and comes back
after Cloud Tasks' backoff. `cpu` is measured (bench/cloud_cpu.py), scaled to an F2.
bench/scale_table.py runs docs/SCALE.md's table with these.

`--ahead` models start tasks prepared ahead (attempt committed and start task created
in the hour before, at a per-job offset): at :00 the handler only reads the job, sends,
and writes the result. That path is modelled here, not built (docs/SCALE.md).

The cost of a month takes the measured per-invocation reads, writes and enqueues of an
hourly job (docs/COST.md, from bench/cloud_cost.py) through bench/cost_model.py, with
the App Engine instance hours the simulation counted (an instance is billed for 15
minutes after it was last needed) instead of cost_model's even-load estimate.
"""

from __future__ import annotations

import argparse
import heapq
import math
import sys
from collections import deque
from dataclasses import dataclass, replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.cost_model import F2_CPU_MS, Prices, Usage, monthly_cost  # noqa: E402
from bench.queue_groups import QueueGroups  # noqa: E402
from engine.adapters.cloud.datastore_entities import INDEX_SHARDS  # noqa: E402
from statemachine.shards import shard_of  # noqa: E402

HOUR = 3600.0
# docs/COST.md, measured by bench/cloud_cost.py: a job that runs every hour.
HOURLY = Usage(reads=3.05, writes=3.0, enqueues=1.0)
F2_CPU = F2_CPU_MS / 1000


@dataclass(frozen=True)
class Limits:
    """The services' limits and the handler's costs (seconds, per second)."""

    dispatch_rate: float = 500.0  # Cloud Tasks: max_dispatches_per_second, at most 500 a queue
    burst: int = 100  # max_burst_size: picked by Cloud Tasks (rate / 5 for App Engine queues), at most 500
    queue_concurrency: int = 1000  # max_concurrent_dispatches as `main.py queues` sets it (at most 5,000)
    create_quota: float = 100_000.0  # Cloud Tasks API requests: 6,000,000 a minute per project
    db_writes: float | None = None  # database writes/s ceiling; None: it keeps up (warm, spread keys)
    db_ramp: bool = False  # Firestore's 500/50/5 rule: 500 ops/s, +50% every 5 minutes
    hot_index: float | None = None  # writes/s one range of an index of a time takes (Firestore: ~500)
    sharded_times: int = 0  # ranges each such index is spread over; 0: the layout before (one, hit by the tick twice)
    slots: int = 32  # app.yaml max_concurrent_requests
    cpu: float = F2_CPU  # instance CPU per invocation: measured (bench/cloud_cpu.py), scaled to an F2
    target_util: float = 0.6  # App Engine's target_cpu_utilization default
    cold_start: float = 5.0  # a new instance's start (Python, gRPC, ndb): assumed
    scale_period: float = 1.0  # how often the autoscaler looks
    min_instances: int = 1  # app.yaml
    max_instances: int | None = None  # app.yaml automatic_scaling.max_instances (none by default)
    idle_billed: float = 900.0  # App Engine bills an instance 15 minutes past its last request
    network: float = 0.005  # Cloud Tasks to the app
    read: float = 0.015  # one lookup
    commit: float = 0.060  # the tick's transaction: lookups and the commit of 2 writes
    create: float = 0.030  # CreateTask for the next tick
    target: float = 0.200  # the job's target answering
    result: float = 0.050  # the result's transaction (1 write)
    ahead: bool = False  # start tasks prepared ahead (see the module's docstring)
    cold_group: bool = False  # Cloud Tasks' 500/50/5 ramp on each queue group (bench/queue_groups.py)
    scattered: bool = False  # shard names not consecutive: each queue its own group
    creates_ahead: bool = False  # the next tick created outside the burst, not by the tick at :00
    pending_limit: float | None = None  # App Engine aborts a request waiting longer for an instance

    def before_send(self) -> float:
        return self.read if self.ahead else self.commit + self.create

    def burst_writes(self) -> float:
        """Writes per invocation inside the burst: the tick's 2 and the result's, or
        the result's alone when the start was prepared ahead."""
        return 1.0 if self.ahead else HOURLY.writes

    def service(self) -> float:
        return self.network + self.before_send() + self.target + self.result

    def instance_slots(self) -> int:
        """Requests an instance holds at once: app.yaml's limit, or fewer when its CPU
        is the bound (one core: `service / cpu` requests keep it busy)."""
        return max(1, min(self.slots, math.floor(self.service() / self.cpu)))


@dataclass
class Outcome:
    lateness: list[float]
    instance_seconds: float
    peak_instances: int
    delivered: int
    peak_creates: float = 0.0
    aborted: int = 0  # requests App Engine gave up on in its pending queue (each retried)

    def percentile(self, p: float) -> float:
        ordered = sorted(self.lateness)
        return ordered[min(len(ordered) - 1, int(p * len(ordered)))] if ordered else 0.0


class _Database:
    """A FIFO write budget: each commit takes `writes` of it; None: unlimited. And, with
    `hot_index`, a FIFO per range of each index of a time: each write into it takes
    1 / hot_index seconds of that range."""

    def __init__(self, limits: Limits):
        self.limits, self.free_at = limits, 0.0
        self.range_free_at: dict[tuple[str, int], float] = {}

    def rate(self, t: float) -> float | None:
        if self.limits.db_ramp:
            ramped = 500.0 * 1.5 ** math.floor(t / 300.0)
            return ramped if self.limits.db_writes is None else min(ramped, self.limits.db_writes)
        return self.limits.db_writes

    def commit(self, ready: float, writes: float, indexed: tuple[tuple[str, int], ...] = ()) -> float:
        """When a commit ready at `ready` goes through; `indexed`: the (index, range) it writes."""
        done = ready
        rate = self.rate(ready)
        if rate is not None:
            self.free_at = max(self.free_at, ready) + writes / rate
            done = max(done, self.free_at)
        return max(done, self.index(ready, indexed))

    def index(self, ready: float, indexed: tuple[tuple[str, int], ...]) -> float:
        """When writes ready at `ready` into the (index, range)s `indexed` are through."""
        done = ready
        if self.limits.hot_index is not None:
            for place in indexed:
                free = max(self.range_free_at.get(place, 0.0), ready) + 1.0 / self.limits.hot_index
                self.range_free_at[place] = free
                done = max(done, free)
        return done

    def tick_writes(self, job_range: int) -> tuple[tuple[str, int], ...]:
        """The index ranges the tick's transaction writes."""
        if self.limits.ahead:  # committed an hour before
            return ()
        if self.limits.sharded_times:
            return (("job", job_range),)
        return (("job", 0), ("invocation", 0))

    def result_writes(self, job_range: int) -> tuple[tuple[str, int], ...]:
        """The index ranges the result's transaction writes: the job's next watchdog
        time and the finished invocation's retention time (before: its status, in the
        composite (status, created_time) index)."""
        place = job_range if self.limits.sharded_times else 0
        return (("job", place), ("invocation", place))


def due_times(jobs: int, aligned: bool) -> list[float]:
    return [0.0] * jobs if aligned else [i * HOUR / jobs for i in range(jobs)]


def simulate(jobs: int, shards: int, aligned: bool, limits: Limits = Limits()) -> Outcome:
    """One hour of `jobs` hourly jobs over `shards` queues."""
    return _Simulation(jobs, shards, aligned, limits).run()


class _Simulation:
    def __init__(self, jobs: int, shards: int, aligned: bool, limits: Limits):
        self.limits, self.shards = limits, shards
        self.queues: list[deque[tuple[float, int]]] = [deque() for _ in range(shards)]
        for job, due in enumerate(due_times(jobs, aligned)):
            # (due, the job's range of the indexes of times), in its queue
            self.queues[shard_of("sim", f"job-{job}", shards)].append(
                (due, shard_of("sim", f"job-{job}", limits.sharded_times)))
        self.tokens = [float(limits.burst)] * shards
        self.filled_at = [0.0] * shards
        self.in_flight = [0] * shards
        self.waiting_slot: list[bool] = [False] * shards
        self.events: list[tuple[float, int, int, float, int, int]] = []  # (time, kind, shard, due, range, attempt)
        self.db = _Database(limits)
        self.groups = QueueGroups(shards, limits.scattered, limits.cold_group)
        self.per_instance = limits.instance_slots()
        steady = math.ceil(jobs / HOUR * limits.cpu / limits.target_util) if not aligned else 0
        self.instances = max(limits.min_instances, steady)
        self.floor = self.instances
        self.starting, self.busy = 0, 0
        self.pending: deque[tuple[int, float, int, float, int]] = deque()  # (shard, due, range, since, attempt)
        self.aborted = 0
        self.lateness: list[float] = []
        self.needed: deque[tuple[float, int]] = deque()
        self.billed, self.peak, self.last_scale = 0.0, self.instances, 0.0
        self.creates: dict[int, int] = {}
        self.scaler_due = False
        self.arrived, self.last_look = 0, 0.0

    def push(self, at: float, kind: int, shard: int = 0, due: float = 0.0, job_range: int = 0,
             attempt: int = 0) -> None:
        heapq.heappush(self.events, (at, kind, shard, due, job_range, attempt))

    def run(self) -> Outcome:
        for shard, queue in enumerate(self.queues):
            if queue:
                self.push(queue[0][0], _TRY, shard)
        self._scaler(0.0)
        end = 0.0
        while self.events:
            at, kind, shard, due, job_range, attempt = heapq.heappop(self.events)
            end = at
            if kind == _TRY:
                self._dispatch(at, shard)
            elif kind == _ARRIVE:
                self.pending.append((shard, due, job_range, at, attempt))
                self.arrived += 1
                self._serve(at)
            elif kind == _COMMIT:
                self._commit(at, shard, due, job_range)
            elif kind == _RESULT:
                self.push(self.db.index(at, self.db.result_writes(job_range)), _DONE, shard)
            elif kind == _DONE:
                self._done(at, shard)
            elif kind == _READY:
                self.starting -= 1
                self.instances += 1
                self._serve(at)
            else:
                self.scaler_due = False
                if self._busy_anywhere():
                    self._scale(at)
                    self._scaler(at + self.limits.scale_period)
        self._bill(max(end, HOUR) + self.limits.idle_billed)
        return Outcome(self.lateness, self.billed, self.peak, len(self.lateness),
                       max(self.creates.values(), default=0), self.aborted)

    def _scaler(self, at: float) -> None:
        """The autoscaler's next look, unless one is due already."""
        if not self.scaler_due:
            self.scaler_due = True
            self.push(at, _SCALE)

    def _busy_anywhere(self) -> bool:
        return bool(self.busy or self.pending or any(self.queues))

    def _dispatch(self, now: float, shard: int) -> None:
        """Hand the shard's due tasks to the app as its token bucket and its in-flight
        limit allow; come back when the next token, task or free place is due."""
        limits, queue = self.limits, self.queues[shard]
        refill = (now - self.filled_at[shard]) * limits.dispatch_rate
        self.tokens[shard] = min(limits.burst, self.tokens[shard] + refill)
        self.filled_at[shard] = now
        while (queue and queue[0][0] <= now and self.tokens[shard] >= 1
               and self.in_flight[shard] < limits.queue_concurrency
               and self.groups.next_free(shard) <= now + _HORIZON):
            due, job_range = queue.popleft()
            slot = self.groups.take(shard, now)  # now, or a slot of a cold group's ramp just ahead
            self.tokens[shard] -= 1
            self.in_flight[shard] += 1
            self.push(slot + limits.network, _ARRIVE, shard, due, job_range)
        if not queue:
            return
        if self.in_flight[shard] >= limits.queue_concurrency:
            self.waiting_slot[shard] = True  # _done calls again
        elif queue[0][0] > now:
            self.push(queue[0][0], _TRY, shard)
        elif self.groups.next_free(shard) > now + _HORIZON:  # the cold group's ramp holds it
            self.push(self.groups.next_free(shard) - _HORIZON / 2, _TRY, shard)
        else:  # a few tokens at a time: 10 ms steps keep the event count down
            self.push(now + max(0.01, (1 - self.tokens[shard]) / limits.dispatch_rate), _TRY, shard)

    def _serve(self, now: float) -> None:
        limits = self.limits
        while self.pending and self.busy < self.instances * self.per_instance:
            shard, due, job_range, since, attempt = self.pending.popleft()
            if limits.pending_limit is not None and now - since > limits.pending_limit:
                self._abort(now, shard, due, job_range, attempt)
                continue
            self.busy += 1
            # An event at the moment the commit is ready: the database's queues take writes in time order.
            self.push(now + (limits.read if limits.ahead else limits.commit), _COMMIT, shard, due, job_range)
        if self.pending:
            self._scaler(max(now, self.last_scale + limits.scale_period))

    def _abort(self, now: float, shard: int, due: float, job_range: int, attempt: int) -> None:
        """App Engine gave up on a request that waited too long for an instance: Cloud
        Tasks retries it after its backoff (0.1 s doubling, at most 60 s), a dispatch of
        its queue's group again."""
        self.aborted += 1
        retry = self.groups.take(shard, now + min(60.0, 0.1 * 2 ** attempt))
        self.push(retry + self.limits.network, _ARRIVE, shard, due, job_range, attempt + 1)

    def _commit(self, ready: float, shard: int, due: float, job_range: int) -> None:
        """The tick's commit is ready: once through, the next tick is created and the request leaves."""
        limits = self.limits
        committed = self.db.commit(ready, limits.burst_writes(), self.db.tick_writes(job_range))
        creates = not (limits.ahead or limits.creates_ahead)
        # CreateTask of the next tick, in the job's queue's group, before the request leaves.
        sent = self.groups.take(shard, committed) + limits.create if creates else committed
        if creates:
            second = int(sent)
            self.creates[second] = self.creates.get(second, 0) + 1
        self.lateness.append(sent - due)
        # The result's commit (its writes counted in burst_writes) then waits for its index ranges.
        self.push(sent + limits.target + limits.result, _RESULT, shard, due, job_range)

    def _done(self, now: float, shard: int) -> None:
        self.busy -= 1
        self.in_flight[shard] -= 1
        if self.waiting_slot[shard]:
            self.waiting_slot[shard] = False
            self.push(now, _TRY, shard)
        self._serve(now)

    def _scale(self, now: float) -> None:
        """Start instances enough for what is running and waiting at target utilisation,
        and keep (and bill) every instance for `idle_billed` after it was last needed."""
        limits = self.limits
        self.last_scale = now
        # Sized by the requests arriving (as App Engine's scheduler sizes by load), not by
        # the backlog a cold start leaves, which would start instances for a moment's queue.
        rate = self.arrived / max(now - self.last_look, limits.scale_period)
        self.arrived, self.last_look = 0, now
        load = max(self.busy, rate * limits.service())
        wanted = max(self.floor, math.ceil(load / (self.per_instance * limits.target_util)))
        if limits.max_instances is not None:
            wanted = min(wanted, limits.max_instances)
        short = wanted - self.instances - self.starting
        for _ in range(max(0, short)):
            self.starting += 1
            self.push(now + limits.cold_start, _READY)
        self.needed.append((now, max(wanted, self.instances)))
        self.peak = max(self.peak, self.instances + self.starting)

    def _bill(self, end: float) -> None:
        """Instance-seconds of one hour in a steady run of such hours: each second holds
        the most instances needed in the `idle_billed` before it, and what spills past
        the hour overlaps the next hour's start (the same instances, kept warm)."""
        need = [self.floor] * (int(end) + 1)
        for at, count in self.needed:
            need[int(at)] = max(need[int(at)], count)
        window, held = int(self.limits.idle_billed), deque[tuple[int, int]]()
        hour = [0] * int(HOUR)
        for second, count in enumerate(need):
            while held and held[-1][1] <= count:
                held.pop()
            held.append((second, count))
            while held[0][0] < second - window:
                held.popleft()
            phase = second % int(HOUR)
            hour[phase] = max(hour[phase], held[0][1])
        self.billed = float(sum(hour))


_TRY, _ARRIVE, _COMMIT, _RESULT, _DONE, _READY, _SCALE = range(7)
_HORIZON = 0.2  # how far ahead a queue takes slots of its cold group's ramp (fewer events)


def month_cost(outcome_per_hour: Outcome, jobs: int, prices: Prices = Prices()) -> dict[str, float]:
    """USD a month: the measured Datastore and Cloud Tasks use per invocation, and the
    instance hours the simulation billed for one hour, times 720 hours."""
    invocations = jobs * 24 * 30
    items = monthly_cost(invocations, HOURLY, prices)
    instance_hours = outcome_per_hour.instance_seconds / 3600 * 24 * 30
    items["app engine"] = max(0.0, instance_hours * 2 - prices.free_f_hours_day * 30) / 2 * prices.f2_instance_hour
    return items


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--shards", default="1,8,64")
    parser.add_argument("--only", default="", help="run only the variants whose name contains this")
    args = parser.parse_args()
    shard_counts = [int(n) for n in args.shards.split(",")]
    base = Limits()
    print(f"{args.jobs:,} hourly jobs; {base.instance_slots()} requests per F2 instance "
          f"({base.cpu * 1000:g} ms CPU of {base.service() * 1000:.0f} ms each), cold start {base.cold_start:g} s")
    print(f"{'schedule':<9} {'N':>3} {'variant':<30} {'p50 s':>8} {'p99 s':>8} {'max s':>8} "
          f"{'peak inst':>9} {'inst-h/h':>8} {'creates/s':>9} {'$/month':>9}")
    rows = [(aligned, n, "today's chain", base) for aligned in (True, False) for n in shard_counts]
    widest = max(shard_counts)
    capped = replace(base, max_instances=1000)  # docs/SCALE.md's recommendation, with N = 64
    rows += [
        (True, widest, "max_instances 1000", capped),
        (True, widest, "max_instances 500", replace(base, max_instances=500)),
        (True, widest, "max 1000, starts ahead", replace(capped, ahead=True)),
        (True, widest, "max 1000, db 10,000 w/s", replace(capped, db_writes=10_000.0)),
        (True, widest, "max 1000, db 10k + ahead", replace(capped, db_writes=10_000.0, ahead=True)),
        (True, widest, "max 1000, db cold 500/50/5", replace(capped, db_ramp=True)),
        (True, widest, "max 1000, time index before", replace(capped, hot_index=500.0)),
    ]
    # The sharded layout's ranges (engine/adapters/cloud/datastore_entities.py), 500 writes/s each.
    rows += [(True, widest, f"max 1000, time index {k} ranges", replace(capped, hot_index=500.0, sharded_times=k))
             for k in sorted({64, 128, INDEX_SHARDS})]
    rows += [(True, widest, f"no limit, time index {INDEX_SHARDS} ranges",
              replace(base, hot_index=500.0, sharded_times=INDEX_SHARDS))]
    rows = [row for row in rows if args.only in row[2]]
    for aligned, shards, variant, limits in rows:
        outcome = _print_row(args.jobs, shards, aligned, variant, limits)
        if variant in ("max_instances 1000", "today's chain") and (shards == widest or not aligned):
            items = month_cost(outcome, args.jobs)
            print("      " + ", ".join(f"{name} ${value:,.0f}" for name, value in items.items()))


def _print_row(jobs: int, shards: int, aligned: bool, variant: str, limits: Limits) -> Outcome:
    outcome = simulate(jobs, shards, aligned, limits)
    assert outcome.delivered == jobs, f"{jobs - outcome.delivered} jobs never started"
    cost = sum(month_cost(outcome, jobs).values())
    print(f"{'aligned' if aligned else 'spread':<9} {shards:>3} {variant:<30} {outcome.percentile(0.5):>8.1f} "
          f"{outcome.percentile(0.99):>8.1f} {max(outcome.lateness):>8.1f} {outcome.peak_instances:>9,} "
          f"{outcome.instance_seconds / 3600:>8.0f} {outcome.peak_creates:>9,.0f} {cost:>9,.0f}", flush=True)
    return outcome


if __name__ == "__main__":
    main()
