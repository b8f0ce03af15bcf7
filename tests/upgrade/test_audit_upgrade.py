"""The audit log on storage a release left: SQLite gains its table (migration 9) in place,
Datastore needs nothing; a job the release paused reads with no `paused_by`, and the
actions taken afterwards are recorded with who took them."""

from __future__ import annotations

import sqlite3

import pytest

from engine import operations
from engine.adapters.local.schema import MIGRATIONS
from tests.upgrade.restore import RELEASES, open_datastore, open_sqlite
from web.views import job_view


@pytest.fixture(params=[(r, b) for r in RELEASES for b in ("sqlite", "datastore")],
                ids=lambda param: f"{param[0]}-{param[1]}")
def opened(request, tmp_path):
    release, backend = request.param
    if backend == "sqlite":
        return open_sqlite(release, tmp_path)
    return open_datastore(release, request.getfixturevalue("datastore_emulator"))


def test_a_release_s_storage_takes_the_audit_log(opened, tmp_path):
    engine = opened.harness.engine
    [project] = [row.id for row in engine.queries.projects()]
    if opened.schema_versions is not None:
        before, after = opened.schema_versions
        assert before < 9 <= after == len(MIGRATIONS)
        tables = sqlite3.connect(tmp_path / "sundial.db").execute(
            "SELECT name FROM sqlite_master WHERE type IN ('table', 'index') AND name LIKE 'audit%'").fetchall()
        assert sorted(tables) == [("audit",), ("audit_by_job",), ("audit_by_time",)]
    paused = engine.queries.job(project, "paused")
    assert paused.record.paused and paused.record.paused_by == ""  # paused before anyone was recorded
    assert job_view(paused, None, engine.clock.now())["paused_by"] == ""
    assert engine.queries.audit(project, None, 10, None) == ([], None)
    operations.pause(engine, project, "ordinary", "INC-9", actor="user:alice@example.com")
    operations.resume(engine, project, "paused", actor="user:bob@example.com")
    entries, _ = engine.queries.audit(project, None, 10, None)
    assert {(e.job_id, e.actor, e.action) for e in entries} == {
        ("ordinary", "user:alice@example.com", "pause"), ("paused", "user:bob@example.com", "resume")}
    assert engine.queries.job(project, "ordinary").record.paused_by == "user:alice@example.com"
