"""The embedded database checked before `serve` uses it, and copied while it runs.

A damaged file must stop the start: served, it answers with wrong rows and 500s, and
every write goes into the damage. Two checks, both bounded:
- a main file that is missing or empty beside a non-empty `-wal`: SQLite would open it
  as a new, empty database and the WAL's history would be lost without a word;
- `PRAGMA quick_check`, stopped after a time budget (a large file is checked as far
  as the budget goes, and served: the check must not hold a restart for minutes).
"""

from __future__ import annotations

import logging
import os
import sqlite3
import time
from contextlib import closing
from pathlib import Path

from engine.logs import log_event

log = logging.getLogger("sundial.storage")

CHECK_BUDGET = 10.0  # seconds quick_check may take before the start goes on without its verdict
_PROGRESS_STEPS = 1000  # SQLite virtual-machine steps between looks at the clock

RECOVERY = ("restore the newest backup (with its -wal, if it has one) or rescue what can be read "
            "with `sqlite3 DAMAGED .recover | sqlite3 NEW`; then start again with --db NEW")


class DamagedDatabase(Exception):
    """The database may not be served; the message is one line naming the file and the way out."""


def refuse_damaged_database(db_path: str) -> None:
    """Exit (status 1, one line on stderr) instead of serving a damaged database."""
    if db_path == ":memory:":
        return
    try:
        check_database(db_path)
    except DamagedDatabase as error:
        raise SystemExit(f"sundial: refusing to start: {error}") from None


def check_database(path: str | Path, budget: float = CHECK_BUDGET) -> None:
    """Raise DamagedDatabase if the file at `path` may not be served. A path that does
    not exist yet (with no `-wal` beside it) is fine: it becomes a new database."""
    main, wal = Path(path), Path(f"{path}-wal")
    wal_size = wal.stat().st_size if wal.exists() else 0
    main_size = main.stat().st_size if main.exists() else None
    if wal_size and not main_size:
        state = "is missing" if main_size is None else "is empty (0 bytes)"
        raise DamagedDatabase(f"database {main} {state} beside a {wal_size}-byte {wal.name}: "
                              f"its history would be lost; {RECOVERY}")
    if not main_size:
        return
    verdict = _quick_check(main, budget)
    if verdict is not None and verdict != "ok":
        one_line = " ".join(verdict.split())  # SQLite's verdict spans lines
        raise DamagedDatabase(f"database {main} is damaged (quick_check: {one_line}); {RECOVERY}")


def _quick_check(main: Path, budget: float) -> str | None:
    """quick_check's first line, or None when the budget ran out first."""
    deadline = time.monotonic() + budget
    try:
        # Read-only: a damaged file must not be written to (nor its WAL checkpointed) by the check.
        conn = sqlite3.connect(f"{main.resolve().as_uri()}?mode=ro", uri=True, isolation_level=None)
    except sqlite3.Error as error:
        return str(error)
    try:
        conn.set_progress_handler(lambda: int(time.monotonic() > deadline), _PROGRESS_STEPS)
        rows = conn.execute("PRAGMA quick_check(1)").fetchall()
        return "; ".join(str(row[0]) for row in rows) or "no answer"
    except sqlite3.OperationalError as error:
        if time.monotonic() > deadline and "interrupted" in str(error):
            log_event(log, "database check stopped at its time budget", logging.WARNING, database=str(main),
                      budget_seconds=budget)
            return None
        return str(error)
    except sqlite3.DatabaseError as error:  # "file is not a database", "database disk image is malformed"
        return str(error)
    finally:
        conn.close()


def backup_database(source: str | Path, target: str | Path, pages_per_step: int = 1024) -> None:
    """Copy the database at `source` to the file `target` with SQLite's online backup:
    consistent, and safe while `serve` writes to the source (a step holds its read lock
    only for `pages_per_step` pages). The copy is one self-contained file (no -wal),
    readable by its owner only; an existing `target` is replaced only once the copy is whole."""
    source, target = Path(source), Path(target)
    if not source.is_file() or source.stat().st_size == 0:
        raise FileNotFoundError(f"no database at {source}")
    partial = target.with_name(f".{target.name}.partial")
    partial.unlink(missing_ok=True)
    os.close(os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600))
    try:
        with closing(sqlite3.connect(source)) as reader, \
                closing(sqlite3.connect(partial)) as copy:
            reader.backup(copy, pages=pages_per_step)
            copy.execute("PRAGMA journal_mode=DELETE")  # the copy in one file, not a file and its -wal
        os.chmod(partial, 0o600)
        os.replace(partial, target)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise

