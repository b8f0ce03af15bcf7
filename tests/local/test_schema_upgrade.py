"""A database written by an older Sundial opens with this one, its data intact.

Schema 4 marked a job whose deletion through the API had begun with a `"deleted": true`
key in its definition's JSON; schema 6 keeps the mark in a column of its own."""

from __future__ import annotations

import json
import sqlite3

from engine.adapters.local.schema import MIGRATIONS
from engine.adapters.local.sqlite_store import SqliteJobStore
from statemachine.record_form import record_to_dict
from tests.contract import samples

# The row as the code of schema 4 wrote it (sqlite_rows.PUT_JOB then).
PUT_JOB_V4 = ("INSERT OR REPLACE INTO jobs (project, job_id, record, definition, source, config_error,"
              " state, watchdog_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)")


def _database_of_schema_4(path, definitions: dict[str, dict]) -> None:
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
    for script in MIGRATIONS[:4]:
        conn.executescript(script)
    conn.execute("INSERT INTO meta (key, value) VALUES ('schema_version', '4')")
    for job_id, definition in definitions.items():
        record = samples.record("proj", job_id, None)
        conn.execute(PUT_JOB_V4, ("proj", job_id, json.dumps(record_to_dict(record), separators=(",", ":")),
                                  json.dumps(definition, separators=(",", ":")), "api", "", record.state.value, None))
    conn.commit()
    conn.close()


def test_a_job_marked_deleted_in_its_definition_reads_back_deleted_without_the_key(tmp_path):
    path = tmp_path / "old.db"
    kept = samples.definition("kept").to_dict()
    marked = {**samples.definition("going").to_dict(), "deleted": True}  # as operations.py wrote it
    _database_of_schema_4(path, {"kept": kept, "going": marked})

    store = SqliteJobStore(path)
    going, still = store.get_job("proj", "going"), store.get_job("proj", "kept")
    assert going.deleted is True and going.definition == samples.definition("going")
    assert still.deleted is False and still.definition == samples.definition("kept")
    assert [job.deleted for job in store.list_jobs("proj")] == [True, False]  # going, kept

    conn = sqlite3.connect(path)
    rows = dict(conn.execute("SELECT job_id, definition FROM jobs").fetchall())
    assert "deleted" not in json.loads(rows["going"])
    assert json.loads(rows["kept"]) == kept
    assert conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone() == (str(len(MIGRATIONS)),)


def test_the_mark_is_a_column_a_person_can_read(tmp_path):
    store = SqliteJobStore(tmp_path / "new.db")
    store.run_in_transaction(lambda tx: tx.put_job(samples.job("proj", "job")))  # a deleted sample
    conn = sqlite3.connect(tmp_path / "new.db")
    definition, deleted = conn.execute("SELECT definition, deleted FROM jobs").fetchone()
    assert deleted == 1 and json.loads(definition) == samples.definition().to_dict()
