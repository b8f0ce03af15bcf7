"""The stop's grace (SUNDIAL_STOP_GRACE, app/stopping.py): its setting, the instants of
one stop, and an exit that no thread still waiting on a target holds up."""

from __future__ import annotations

import subprocess
import sys
import time
from datetime import timedelta

import pytest

from app.stopping import STOP_MARGIN, StopTimes
from config.settings import from_environment
from tests.e2e.support import ROOT


def test_the_grace_is_8_s_unless_set():
    assert from_environment({}).stop_grace == timedelta(seconds=8)
    assert from_environment({"SUNDIAL_STOP_GRACE": "25s"}).stop_grace == timedelta(seconds=25)
    with pytest.raises(SystemExit, match="SUNDIAL_STOP_GRACE"):
        from_environment({"SUNDIAL_STOP_GRACE": "soon"})


@pytest.mark.parametrize("grace, answers", [(8.0, 8.0 - STOP_MARGIN), (1.0, 0.5), (0.0, 0.0)])
def test_answers_are_waited_for_until_a_margin_before_the_exit(grace, answers):
    before = time.monotonic()
    times = StopTimes.starting_now(timedelta(seconds=grace))
    after = time.monotonic()
    assert before + answers <= times.answers_by <= after + answers
    assert times.exit_by - times.answers_by == pytest.approx(grace - answers)


HELD = """
import threading, time
from app.stopping import exit_now_if_held
threading.Thread(target=time.sleep, args=(60,), name="a-task-waiting-on-its-target").start()
print("stopping", flush=True)
exit_now_if_held()
"""


def test_a_thread_still_waiting_on_its_target_does_not_hold_up_the_exit():
    began = time.monotonic()
    done = subprocess.run([sys.executable, "-c", HELD], cwd=ROOT, capture_output=True, text=True, timeout=30)
    assert time.monotonic() - began < 10
    assert done.returncode == 0 and done.stdout == "stopping\n"
    assert "work still under way is left to the next start" in done.stderr
