"""Small whole runs of one job whose occurrences wait: overlap and catch-up policies,
manual and job triggers, outages, pauses, aborts, disables and policy changes.

`waiting_golden.json` holds what each run gave with the machine as it was before
waiting occurrences left the job record (commit 1da8c97, where every one was stored in
`buffered`): per run, the counts and a digest of the deliveries, the skipped rows and
the finishes. test_machine_waiting.py replays the runs against today's machine. To
see a difference, print a run's outcome on both machines and diff them:

    python -m tests.unit.waiting_scenarios --show NAME    # from each checkout
    python -m tests.unit.waiting_scenarios --write        # from a checkout of 1da8c97 only
"""

from __future__ import annotations

import hashlib
import json
import random
import sys
from datetime import datetime, timedelta
from pathlib import Path
from typing import Callable

from statemachine import events as ev
from statemachine import ids
from statemachine.durations import UTC
from statemachine.policy import Catchup, JobPolicy, Overlap, RetryPolicy, Tuning
from statemachine.schedule import parse_at
from tests.unit.waiting_sim import Simulation, pick

GOLDEN = Path(__file__).with_name("waiting_golden.json")
START = datetime(2026, 1, 5, 10, 0, 30, tzinfo=UTC)
HOURS = timedelta(hours=1)


def at(minutes: float) -> datetime:
    return START + timedelta(minutes=minutes)


def scheduled(invocation_id: str) -> datetime:
    return datetime(1970, 1, 1, tzinfo=UTC) + timedelta(milliseconds=ids.scheduled_millis(invocation_id))


def slow_until(minutes: float, slow: timedelta, fast: timedelta = timedelta(seconds=5)) -> Callable:
    """Occurrences scheduled before START + `minutes` take `slow`, later ones `fast`."""
    return lambda invocation: slow if scheduled(invocation) < at(minutes) else fast


def make_policy(**fields) -> JobPolicy:
    fields.setdefault("schedule_text", "every 1m")
    fields.setdefault("revision", "r1")
    fields.setdefault("timeout", 3 * HOURS)
    fields.setdefault("catchup_window", 10 * HOURS)
    return JobPolicy(**fields)


Scenario = Callable[[], tuple[Simulation, datetime]]


def _buffer_all_slow() -> tuple[Simulation, datetime]:
    sim = Simulation(make_policy(overlap=Overlap.BUFFER_ALL), START,
                     duration=slow_until(40, timedelta(seconds=150)))
    return sim, at(240)


def _buffer_all_with_triggers() -> tuple[Simulation, datetime]:
    sim = Simulation(make_policy(overlap=Overlap.BUFFER_ALL), START,
                     duration=slow_until(30, timedelta(seconds=170)))
    for minute in (3.5, 7.2, 7.3, 15.1, 22.9, 31):
        sim.external(at(minute), ev.ManualTrigger(f"req-{minute}"))
    for minute in (4.4, 12, 12.5, 40):
        sim.external(at(minute), ev.ManualTrigger(f"src-{minute}", "job:up", at(minute - 1)))
    return sim, at(240)


def _outages(overlap: Overlap, catchup: Catchup, window: timedelta = 10 * HOURS) -> Scenario:
    def build() -> tuple[Simulation, datetime]:
        policy = make_policy(overlap=overlap, catchup=catchup, catchup_window=window, max_concurrent=2)
        outages = ((at(9.5), at(14.2)), (at(31), at(31.6)), (at(50), at(120)), (at(130.2), at(131.5)))
        sim = Simulation(policy, START, duration=slow_until(60, timedelta(seconds=130)), outages=outages)
        sim.external(at(33.3), ev.ManualTrigger("req-a"))
        return sim, at(300)
    return build


def _stopped(event: ev.Event, again: Callable, overlap: Overlap = Overlap.BUFFER_ALL) -> Scenario:
    def build() -> tuple[Simulation, datetime]:
        sim = Simulation(make_policy(overlap=overlap, catchup=Catchup.ALL), START,
                         duration=slow_until(30, timedelta(seconds=200)), outages=((at(5), at(12)),))
        sim.external(at(8), ev.ManualTrigger("req-1"))
        sim.external(at(20), event)
        sim.external(at(44), again)
        return sim, at(200)
    return build


def _abort_while_waiting() -> tuple[Simulation, datetime]:
    sim = Simulation(make_policy(overlap=Overlap.BUFFER_ALL), START, duration=slow_until(60, timedelta(seconds=300)))
    sim.external(at(15), ev.ManualTrigger("req-1"))
    sim.external(at(20), ev.Aborted("stuck"))
    sim.external(at(21), ev.Aborted("stuck again"))
    return sim, at(200)


def _timing_change(schedule: str) -> Scenario:
    def build() -> tuple[Simulation, datetime]:
        policy = make_policy(overlap=Overlap.BUFFER_ALL, catchup=Catchup.ALL)
        sim = Simulation(policy, START, duration=slow_until(30, timedelta(seconds=200)),
                         outages=((at(3), at(9)),))
        sim.external(at(12), ev.ManualTrigger("req-1"))
        sim.external(at(20), ev.ScheduleChanged(make_policy(
            schedule_text=schedule, overlap=Overlap.BUFFER_ALL, revision="r2")))
        sim.external(at(25), ev.ScheduleChanged(make_policy(overlap=Overlap.SKIP, revision="r3",
                                                            schedule_text=schedule)))
        return sim, at(240)
    return build


def _at_schedule() -> tuple[Simulation, datetime]:
    times = parse_at([(START + timedelta(minutes=m)).isoformat() for m in (1, 2, 3, 5, 8, 13, 21, 34, 55)]).times
    policy = make_policy(schedule_text="", at=times, overlap=Overlap.SKIP, catchup=Catchup.ALL)
    sim = Simulation(policy, START, duration=lambda _: timedelta(minutes=4), outages=((at(4), at(30)),))
    return sim, at(120)


def _failures_pause() -> tuple[Simulation, datetime]:
    policy = make_policy(overlap=Overlap.BUFFER_ALL, pause_after_failures=3)
    sim = Simulation(policy, START, duration=lambda _: timedelta(seconds=100),
                     fails=lambda invocation: scheduled(invocation) >= at(6))
    sim.external(at(60), ev.Resumed())
    return sim, at(90)


def _small_scan_limit() -> tuple[Simulation, datetime]:
    policy = make_policy(schedule_text="*/20 * * * * ?", overlap=Overlap.SKIP, catchup=Catchup.ALL,
                         catchup_window=timedelta(minutes=5))
    sim = Simulation(policy, START, tuning=Tuning(scan_limit=7), duration=lambda _: timedelta(seconds=15),
                     outages=((at(2), at(14)),))
    return sim, at(40)


def _interval() -> tuple[Simulation, datetime]:
    policy = make_policy(schedule_text="with 1m interval", overlap=Overlap.BUFFER_ALL)
    sim = Simulation(policy, START, duration=lambda _: timedelta(seconds=100))
    for minute in (2, 2.1, 2.2, 9, 9.5):
        sim.external(at(minute), ev.ManualTrigger(f"req-{minute}"))
    return sim, at(60)


SCENARIOS: dict[str, Scenario] = {
    "buffer_all_slow": _buffer_all_slow,
    "buffer_all_with_triggers": _buffer_all_with_triggers,
    "abort_while_waiting": _abort_while_waiting,
    "at_schedule_catchup_all": _at_schedule,
    "failures_pause_waiting": _failures_pause,
    "small_scan_limit": _small_scan_limit,
    "interval_buffer_all": _interval,
    "timing_change_cron": _timing_change("*/2 * * * *"),
    "timing_change_interval": _timing_change("with 30s interval"),
    "pause_resume": _stopped(ev.Paused("maintenance"), ev.Resumed()),
    "disable_enable": _stopped(ev.JobDisabled(), lambda sim: ev.JobEnabled(sim.record.policy)),
    "pause_resume_buffer_one": _stopped(ev.Paused("x"), ev.Resumed(), Overlap.BUFFER_ONE),
}
# The overlap policies the golden machine had: `replace` came later, and a run of it has
# no golden outcome to compare with (tests/unit/test_machine_replace.py covers it).
GOLDEN_OVERLAPS = [Overlap.SKIP, Overlap.BUFFER_ONE, Overlap.BUFFER_ALL, Overlap.ALLOW]
for _overlap in GOLDEN_OVERLAPS:
    for _catchup in Catchup:
        SCENARIOS[f"outages_{_overlap.value}_{_catchup.value}"] = _outages(_overlap, _catchup)
SCENARIOS["outages_buffer_all_all_short_window"] = _outages(Overlap.BUFFER_ALL, Catchup.ALL, timedelta(minutes=20))
SCENARIOS["outages_skip_all_short_window"] = _outages(Overlap.SKIP, Catchup.ALL, timedelta(minutes=20))


# --- random runs ------------------------------------------------------------------------

SCHEDULES = ["every 1m", "*/2 * * * *", "*/20 * * * * ?", "with 1m interval", "every 90s"]


def _random(seed: int) -> Scenario:
    def build() -> tuple[Simulation, datetime]:
        rng = random.Random(seed)
        policy = make_policy(
            schedule_text=rng.choice(SCHEDULES), overlap=rng.choice(GOLDEN_OVERLAPS),
            catchup=rng.choice(list(Catchup)), catchup_window=rng.choice([timedelta(minutes=7), HOURS, 10 * HOURS]),
            max_concurrent=rng.choice([1, 2]), timeout=rng.choice([timedelta(minutes=10), 3 * HOURS]),
            retry=RetryPolicy(rng.choice([1, 2]), timedelta(seconds=5)),
            pause_after_failures=rng.choice([0, 0, 4]),
        )
        durations = [timedelta(seconds=s) for s in rng.sample([3, 20, 70, 130, 400, 900], 3)]
        failing = rng.random() / 3
        outages = tuple(sorted((at(m), at(m + rng.choice([1, 5, 40]))) for m in rng.sample(range(5, 150), 2)))
        sim = Simulation(policy, START, tuning=Tuning(scan_limit=rng.choice([5, 1000])),
                         duration=lambda invocation: pick(invocation, durations),
                         fails=lambda invocation: pick(invocation + "/f", [True, False, False]) and failing > 0.1,
                         outages=outages)
        _random_events(sim, rng, policy)
        return sim, at(200)
    return build


def _random_events(sim: Simulation, rng: random.Random, policy: JobPolicy) -> None:
    other = make_policy(schedule_text=rng.choice(SCHEDULES), overlap=rng.choice(GOLDEN_OVERLAPS),
                        catchup=rng.choice(list(Catchup)), revision="r2")
    for serial in range(rng.randint(3, 12)):
        when = at(rng.uniform(1, 180))
        kind = rng.choice(["manual", "manual", "job", "job", "pause", "resume", "abort", "change", "back",
                           "disable", "enable"])
        sim.external(when, {
            "manual": ev.ManualTrigger(f"req-{serial}"),
            "job": ev.ManualTrigger(f"src-{serial}", "job:up", when - timedelta(seconds=serial)),
            "pause": ev.Paused("p"),
            "resume": ev.Resumed(),
            "abort": ev.Aborted(),
            "change": ev.ScheduleChanged(other),
            "back": ev.ScheduleChanged(policy),
            "disable": ev.JobDisabled(),
            "enable": lambda s: ev.JobEnabled(s.record.policy or policy),
        }[kind])


for _seed in range(40):
    SCENARIOS[f"random_{_seed}"] = _random(_seed)


def run(name: str) -> dict:
    sim, until = SCENARIOS[name]()
    return sim.run(until).comparable()


def summary(outcome: dict) -> dict:
    """Counts, and a digest of each list: what the golden file keeps of a run."""
    kept: dict = {"refused": outcome["refused"]}
    for part in ("delivered", "skipped", "finished"):
        text = json.dumps(outcome[part], sort_keys=True).encode()
        kept[part] = [len(outcome[part]), hashlib.sha256(text).hexdigest()[:16]]
    return kept


if __name__ == "__main__":
    if sys.argv[1:2] == ["--show"]:
        print(json.dumps(run(sys.argv[2]), indent=1))
    elif sys.argv[1:2] == ["--write"]:
        summaries = {name: summary(run(name)) for name in SCENARIOS}
        lines = [f"{json.dumps(name)}: {json.dumps(summaries[name], sort_keys=True)}" for name in sorted(summaries)]
        GOLDEN.write_text("{\n" + ",\n".join(lines) + "\n}\n")
        print(f"wrote {GOLDEN}")
