"""The config import applies a file's jobs in batches, several jobs per transaction
(store.jobs_per_commit), on a real SQLite store: a crash between two batches leaves
a state the next import finishes, into exactly what an uninterrupted import gives;
a batch that would write more than one commit takes is split, not refused."""

from __future__ import annotations

import sqlite3

import pytest

from app.importer import import_directory
from engine.adapters.local import sqlite_rows
from engine.adapters.local.sqlite_store import SqliteJobStore
from engine.ports import StoreError
from engine.service import build_engine
from engine.targets import build_targets
from statemachine.policy import Tuning
from tests.engine.harness import FakeClock


def write_project(directory, jobs: int) -> None:
    directory.mkdir(exist_ok=True)
    entries = "".join(
        f"  - id: j{i:03d}\n    schedule: \"{i % 60} {i % 24} * * *\"\n"
        f"    target: {{http: {{url: 'https://x.example.com/{i}', body: '${{scheduledTime}}'}}}}\n"
        + ("    disabled: true\n" if i % 5 == 0 else "")
        for i in range(jobs)
    )
    (directory / "p.yaml").write_text("jobs:\n" + entries + "  - id: broken\n    schedule: nonsense\n")


class CrashingStore(SqliteJobStore):
    """The real store; its `crash_at`-th transaction runs its body, then fails before
    the commit (rolled back, as a process killed there would leave it). Counts commits."""

    crash_at = 0

    def __init__(self, path):
        super().__init__(path)
        self.transactions = 0

    def run_in_transaction(self, body):
        self.transactions += 1
        if self.transactions != self.crash_at:
            return super().run_in_transaction(body)

        def crashing(tx):
            body(tx)
            raise StoreError("injected: the process died before this commit")

        return super().run_in_transaction(crashing)


def engine_on(store):
    return build_engine(store, build_targets("local"), FakeClock(), Tuning(), secret=b"t")


def state(path) -> dict:
    """Every row the import writes: jobs, their tasks, the project."""
    conn = sqlite3.connect(path)
    try:
        return {
            "jobs": conn.execute("SELECT project, job_id, record, definition, source, config_error, state, "
                                 "watchdog_at, deleted FROM jobs ORDER BY job_id").fetchall(),
            "tasks": conn.execute("SELECT name, kind, payload, eta, queue FROM tasks ORDER BY name").fetchall(),
            "projects": conn.execute("SELECT * FROM projects").fetchall(),
        }
    finally:
        conn.close()


@pytest.mark.parametrize("crash_at", [2, 3, 4, 6])
def test_a_crash_between_batches_is_finished_by_the_next_import(tmp_path, crash_at):
    configs = tmp_path / "configs"
    write_project(configs, 23)
    whole = CrashingStore(tmp_path / "whole.db")
    whole.jobs_per_commit = 5
    import_directory(engine_on(whole).configs, configs)
    # One saves the settings, five apply the 23 jobs, one saves the hash (the broken entry
    # never loaded: it has no job to carry its error).
    assert whole.transactions == 1 + 5 + 1

    crashed = CrashingStore(tmp_path / "crashed.db")
    crashed.jobs_per_commit, crashed.crash_at = 5, crash_at
    with pytest.raises(StoreError, match="injected"):
        import_directory(engine_on(crashed).configs, configs)
    halfway = state(tmp_path / "crashed.db")
    assert len(halfway["jobs"]) == 5 * (crash_at - 2)  # the batches committed before the crash
    assert halfway["projects"][0][1] == ""  # no hash: the next import does it all again

    again = CrashingStore(tmp_path / "crashed.db")  # a restarted server
    again.jobs_per_commit = 5
    import_directory(engine_on(again).configs, configs)
    assert state(tmp_path / "crashed.db") == state(tmp_path / "whole.db")
    before = again.transactions
    import_directory(engine_on(again).configs, configs)
    assert again.transactions == before  # and then nothing is left to do


def test_a_batch_over_the_commit_budget_is_split_until_it_fits(tmp_path, monkeypatch):
    monkeypatch.setattr(sqlite_rows, "COMMIT_ENTITY_LIMIT", 4)  # each new job writes one row
    configs = tmp_path / "configs"
    write_project(configs, 13)
    store = CrashingStore(tmp_path / "s.db")
    import_directory(engine_on(store).configs, configs)
    assert len(state(tmp_path / "s.db")["jobs"]) == 13
    # 13 refused, then 6 and 7 refused, then 3 + 3 and 3 + 4 (4 fits): 7 tries, 4 commits.
    assert store.transactions == 1 + 7 + 1
