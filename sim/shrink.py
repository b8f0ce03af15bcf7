"""Shrinking a failing run to a smaller one that fails the same way.

A run is its `Settings`: the seed, which jobs exist, which faults are injected, how
many processes, whether an operator acts, how long the faults last, and the step it
stops at. Shrinking tries smaller settings one change at a time, in a fixed order (so
that shrinking a seed twice gives the same answer): cut the time to just past the
failure, then halve the faulty period, drop a process, the operator, each job, each
fault kind. A change is kept when the run still breaks the same invariant, at no later
step and no later simulated time, and passes over the changes repeat until none is
kept or the budget of runs is spent.

Any change of the settings draws a different run from the same seed (the random
choices fall elsewhere), so a shrunk run is not a slice of the original: it is
another, smaller run that breaks the same invariant, replayed exactly by its own
command (`sim.replay.replay_command`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import astuple, dataclass, replace
from datetime import timedelta

from sim.selfcheck import run_with
from sim.simulation import Result, Settings

SHRINK_RUNS = 200  # runs one shrink may take: each is cut at the best failure's step
SHORTEST_FAULTY = timedelta(minutes=1)

Move = Callable[[Settings, Result], Settings | None]


@dataclass(frozen=True, order=True)
class Size:
    """What makes a failing run larger; a shrunk run is no larger in any of them."""

    jobs: int
    faults: int
    processes: int
    operator: int  # 1 with the operator acting, 0 without
    seconds: float  # simulated when the invariant broke
    steps: int

    def within(self, other: Size) -> bool:
        return all(mine <= theirs for mine, theirs in zip(astuple(self), astuple(other)))


def size_of(settings: Settings, result: Result) -> Size:
    return Size(len(settings.jobs), len(settings.mix.kinds()), settings.processes,
                int(settings.operator_every is not None), result.simulated.total_seconds(), result.steps)


def broken_invariant(violation: str) -> str:
    """The invariant a violation's message names (the text before its first colon)."""
    return violation.split(":")[0]


@dataclass(frozen=True)
class Shrunk:
    first: Result  # the run as asked for
    settings: Settings  # the smallest failing run found, its `max_steps` at the failure
    result: Result
    runs: int

    def describe(self, original: Settings) -> str:
        before, after = size_of(original, self.first), size_of(self.settings, self.result)
        parts = [f"{name} {was:g} -> {now:g}" for name, was, now in zip(
            ("jobs", "faults", "processes", "operator", "simulated seconds", "steps"),
            astuple(before), astuple(after))]
        return f"shrunk in {self.runs} runs: " + ", ".join(parts)


def shrink(settings: Settings, variant: str | None = None, max_runs: int = SHRINK_RUNS) -> Shrunk:
    """The smallest run found that breaks the invariant `settings` breaks.

    :raises ValueError: the run of `settings` breaks nothing.
    """
    first = run_with(variant, settings)
    if first.ok:
        raise ValueError(f"seed {settings.seed} breaks no invariant: nothing to shrink")
    best, best_result, runs = replace(settings, max_steps=first.steps), first, 1
    kept = True
    while kept and runs < max_runs:
        kept = False
        for move in _moves(best):
            candidate = move(best, best_result)
            if candidate is None or runs >= max_runs:
                continue
            result, runs = run_with(variant, candidate), runs + 1
            if _fails_alike(result, best_result) and size_of(candidate, result).within(size_of(best, best_result)):
                best, best_result, kept = replace(candidate, max_steps=result.steps), result, True
    return Shrunk(first, best, best_result, runs)


def _fails_alike(result: Result, best: Result) -> bool:
    return not result.ok and broken_invariant(result.violation) == broken_invariant(best.violation)


def _moves(settings: Settings) -> Iterator[Move]:
    """The changes to try, in order; each may find nothing to change (None)."""
    yield _cut_time
    yield _halve_faults
    yield lambda s, _: replace(s, processes=s.processes - 1) if s.processes > 1 else None
    yield lambda s, _: replace(s, operator_every=None) if s.operator_every is not None else None
    for job in settings.jobs:
        yield _without_job(job)
    for kind in settings.mix.kinds():
        yield _without_fault(kind)


def _cut_time(settings: Settings, result: Result) -> Settings | None:
    """End the run a second after its failure: the steps before it are the same run
    (the end only ever enters the clock's next wake as the latest of them)."""
    failed_at = math.ceil(result.simulated.total_seconds()) + 1
    faulty = settings.faulty.total_seconds()
    if failed_at < faulty:
        cut = replace(settings, faulty=timedelta(seconds=failed_at), quiet=timedelta(0))
    else:
        cut = replace(settings, quiet=timedelta(seconds=failed_at - faulty))
    return cut if cut.faulty + cut.quiet < settings.faulty + settings.quiet else None


def _halve_faults(settings: Settings, result: Result) -> Settings | None:
    half = timedelta(seconds=settings.faulty.total_seconds() // 2)
    return replace(settings, faulty=half) if half >= SHORTEST_FAULTY else None


def _without_job(job: str) -> Move:
    def move(settings: Settings, result: Result) -> Settings | None:
        jobs = tuple(one for one in settings.jobs if one != job)
        return replace(settings, jobs=jobs) if jobs and jobs != settings.jobs else None
    return move


def _without_fault(kind: str) -> Move:
    def move(settings: Settings, result: Result) -> Settings | None:
        return replace(settings, mix=settings.mix.without(kind)) if kind in settings.mix.kinds() else None
    return move
