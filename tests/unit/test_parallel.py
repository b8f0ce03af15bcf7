"""The pieces of tests/support/parallel.py that `make test`'s two workers rely on."""

from __future__ import annotations

import threading
from pathlib import Path
from types import SimpleNamespace

from tests.support.parallel import SLOW_FILES, RunLock, slow_files_first

ROOT = Path(__file__).resolve().parents[2]


def _enter_in_thread(lock: RunLock, exclusive: bool) -> tuple[threading.Thread, threading.Event, threading.Event]:
    entered, leave = threading.Event(), threading.Event()

    def hold():
        with lock.held(exclusive):
            entered.set()
            leave.wait(10)

    thread = threading.Thread(target=hold, daemon=True)
    thread.start()
    return thread, entered, leave


def test_shared_holders_run_together_and_an_exclusive_one_alone(tmp_path):
    # Each worker opens the files itself: RunLocks are open files of their own, as in two processes.
    first, second, serial, late = (RunLock(tmp_path) for _ in range(4))
    with first.held(exclusive=False):
        thread, entered, leave = _enter_in_thread(second, exclusive=False)
        assert entered.wait(10)  # both share it
        leave.set()
        thread.join(10)
        waiting, inside, go = _enter_in_thread(serial, exclusive=True)
        assert not inside.wait(0.3)  # the serial test waits for the shared holder
        # A test that comes along meanwhile waits behind the serial one: the other worker's
        # next test may not keep the serial one waiting for ever.
        behind, late_inside, late_go = _enter_in_thread(late, exclusive=False)
        assert not late_inside.wait(0.3)
    assert inside.wait(10)  # the serial test runs once the shared holder is done...
    assert not late_inside.wait(0.3)  # ...alone
    go.set()
    assert late_inside.wait(10)
    late_go.set()
    for each in (waiting, behind):
        each.join(10)


def test_the_slow_files_come_first_and_the_rest_keep_their_order():
    names = ["tests/unit/test_a.py", SLOW_FILES[2], "tests/web/test_b.py", SLOW_FILES[0], "tests/unit/test_a.py"]
    items = [SimpleNamespace(path=ROOT / name, n=n) for n, name in enumerate(names)]
    slow_files_first(items, ROOT)
    assert [item.n for item in items] == [3, 1, 0, 2, 4]


def test_every_slow_file_named_exists():
    assert [name for name in SLOW_FILES if not (ROOT / name).is_file()] == []
