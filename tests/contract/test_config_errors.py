"""A job whose entry in its config file turns invalid keeps its last good definition and
carries the entry's error (`StoredJob.config_error`) until the entry is valid again or
leaves the file; on every backend, through the real file importer, writing only what
changed."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.importer import import_directory
from engine.service import build_engine
from statemachine.policy import Tuning
from tests.engine.harness import FakeClock, RecordingTarget

VALID = """\
jobs:
  - id: x
    schedule: every 1m
    target: {noop: {}}
  - id: y
    schedule: every 1h
    target: {noop: {}}
"""
BROKEN = VALID.replace("every 1m", '"not a schedule"')
WRITES = ("put_", "delete_", "enqueue")


class CountingStore:
    """The backend's store, counting what each transaction writes: (method, project/job)."""

    def __init__(self, store):
        self.inner, self.writes = store, []

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def run_in_transaction(self, body):
        writes = []  # a body run again after a conflict counts once: only the last run commits

        def counted(tx):
            writes.clear()
            return body(_CountingTx(tx, writes))

        result = self.inner.run_in_transaction(counted)
        self.writes += writes
        return result


class _CountingTx:
    def __init__(self, tx, writes):
        self._tx, self._writes = tx, writes

    def __getattr__(self, name):
        method = getattr(self._tx, name)
        if not name.startswith(WRITES):
            return method

        def write(*args, **kwargs):
            job = args[0] if args else None
            self._writes.append((name, f"{job.record.project}/{job.record.job_id}" if name == "put_job" else ""))
            return method(*args, **kwargs)

        return write


class Files:
    def __init__(self, backend, tmp_path: Path):
        self.store = CountingStore(backend.store)
        self.engine = build_engine(self.store, {"noop": RecordingTarget()}, FakeClock(), Tuning(), secret=b"s")
        self.directory = tmp_path / "configs"
        self.directory.mkdir()

    def load(self, text: str) -> list[tuple[str, str]]:
        """Write p.yaml, import the directory; returns the writes it made."""
        (self.directory / "p.yaml").write_text(text)
        self.store.writes = []
        import_directory(self.engine.configs, self.directory)
        return self.store.writes

    def job(self, job_id: str = "x"):
        return self.store.inner.get_job("p", job_id)


@pytest.fixture
def files(backend, tmp_path):
    return Files(backend, tmp_path)


def test_a_broken_entry_marks_its_job_and_a_fixed_one_clears_it(files):
    files.load(VALID)
    assert files.job().config_error == ""
    files.load(BROKEN)
    job, [error] = files.job(), files.store.inner.get_project("p").job_errors
    assert error.startswith("p.yaml:3: job 'x': schedule: unrecognised schedule")
    assert job.config_error == error  # the very line the project shows
    assert job.definition.schedule == "every 1m" and job.record.state.value == "SCHEDULED"
    assert files.job("y").config_error == ""

    assert files.load(BROKEN) == []  # unchanged: nothing written
    # The file changed elsewhere and x's error reads as before: x is not written again.
    writes = files.load(BROKEN.replace("every 1h", "every 2h"))
    assert ("put_job", "p/y") in writes and ("put_job", "p/x") not in writes
    assert files.job().config_error == error

    files.load(VALID)  # the entry as it was: the same definition, and the error goes
    assert files.job().config_error == "" and files.job().definition.schedule == "every 1m"


def test_a_broken_entry_removed_from_the_file_takes_its_error_with_it(files):
    files.load(VALID)
    files.load(BROKEN)
    assert files.job().config_error
    files.load("jobs:\n  - id: y\n    schedule: every 1h\n    target: {noop: {}}\n")
    job = files.job()
    assert job.config_error == "" and job.record.state.value == "DISABLED"


def test_an_entry_broken_before_its_job_existed_marks_no_job(files):
    files.load(BROKEN)
    assert files.job() is None and files.job("y").config_error == ""
    assert len(files.store.inner.get_project("p").job_errors) == 1
