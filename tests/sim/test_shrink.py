"""Shrinking a failing seed (sim/shrink.py) and the one-line command that replays it
(sim/replay.py), on a deliberately broken engine: the shrunk run still breaks the same
invariant, is no larger than the original in any way and smaller in some, comes out
the same every time (the CLI's shrink against the test's), and its printed command replays it byte for byte."""

from __future__ import annotations

import argparse
import logging
import shlex
from datetime import timedelta

import pytest

from sim.__main__ import main
from sim.ports import FaultMix
from sim.replay import COMMAND, add_run_flags, replay_command, settings_from
from sim.shrink import Shrunk, broken_invariant, shrink, size_of
from sim.simulation import Settings

VARIANT = "settle-live-attempt"  # caught by seed 1 at step 292 (docs/RELIABILITY.md, the self-check)


@pytest.fixture(autouse=True)
def _quiet_engine():
    logging.disable(logging.CRITICAL)
    yield
    logging.disable(logging.NOTSET)


@pytest.fixture(scope="module")
def shrunk() -> Shrunk:
    logging.disable(logging.CRITICAL)
    return shrink(Settings(1), VARIANT)


def test_a_shrunk_run_still_fails_alike_no_larger_and_its_command_replays_it(shrunk, capsys):
    original = Settings(1)

    assert not shrunk.first.ok and not shrunk.result.ok
    assert broken_invariant(shrunk.result.violation) == broken_invariant(shrunk.first.violation)
    before, after = size_of(original, shrunk.first), size_of(shrunk.settings, shrunk.result)
    assert after.within(before) and after != before, (before, after)
    assert after.steps < before.steps / 4 and after.jobs < before.jobs

    command = replay_command(shrunk.settings, VARIANT)
    assert command.startswith(COMMAND + " ")
    assert main(shlex.split(command)[len(shlex.split(COMMAND)):] + ["--no-shrink"]) == 1
    replayed = capsys.readouterr().out
    assert f"digest {shrunk.result.digest[:16]}: VIOLATION" in replayed, replayed


def test_the_cli_shrinks_a_failing_seed_to_the_same_run_every_time(shrunk, capsys):
    assert main(["--seed", "1", "--variant", VARIANT]) == 1
    lines = capsys.readouterr().out.splitlines()
    [shortest] = [line for line in lines if line.startswith("shortest failing prefix: ")]
    assert shortest == "shortest failing prefix: " + replay_command(shrunk.settings, VARIANT)
    assert f"digest {shrunk.result.digest[:16]})" in lines[lines.index(shortest) + 1]


def test_nothing_to_shrink_in_a_passing_run():
    with pytest.raises(ValueError):
        shrink(Settings(1, max_steps=20))


@pytest.mark.parametrize("settings", [
    Settings(3),
    Settings(4, jobs=("allow", "skip"), processes=1, operator_every=None, max_steps=17),
    Settings(5, faulty=timedelta(seconds=94.5), quiet=timedelta(0),
             mix=FaultMix(duplicate_keeps_retry=False).without("stall").without("202-never").without("lost-ack")),
], ids=["standard", "fewer", "shorter"])
def test_a_runs_command_reads_back_as_the_same_settings(settings):
    parser = argparse.ArgumentParser()
    parser.add_argument("--seed", type=int)
    parser.add_argument("--variant")
    add_run_flags(parser)
    args = parser.parse_args(shlex.split(replay_command(settings))[len(shlex.split(COMMAND)):])
    assert settings_from(args, args.seed) == settings
