"""Rolling back to the release before this one: what this tree writes, read by that
release's own readers (tests/upgrade/release_0_1_0, frozen as released, run in a
process of their own).

This tree drives real jobs on SQLite (the engine harness, a fake clock) and the test
hands the previous release the job rows exactly as stored: each record's text and each
definition's. With the written-layout switch off (SUNDIAL_RECORD_VERSION=1, which the
operator sets to prepare a rollback) every record is read, fan-outs under way included;
every definition that uses no field added since that release is read too, and one that
does is refused by name (that release cannot honour it: docs/DEPLOY.md says what to do
first). With the switch on (the default), a record that holds a fan-out's events in rows
is version 2, which that release refuses.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

from config.loader import parse_project_text
from config.settings import from_environment
from engine.adapters.local.record_cache import RecordCache
from engine.config_import import JobSnapshot, ProjectSnapshot
from statemachine import events as ev
from statemachine.definition import JobDefinition
from statemachine.machine import step
from statemachine.policy import Tuning
from statemachine.record_form import record_from_dict, record_to_dict
from tests.engine.harness import START, Harness

RELEASE = Path(__file__).resolve().parent / "release_0_1_0"
# The switch as the operator sets it: off (1, to prepare a rollback) and on (unset: 2).
OFF = Tuning(fanout_rows=from_environment({"SUNDIAL_RECORD_VERSION": "1"}).tuning.fanout_rows)
ON = Tuning(fanout_rows=from_environment({}).tuning.fanout_rows)  # the default: 2

# Jobs that use only what 0.1.0 knew, and one per field added since.
PLAIN = """
jobs:
  - {id: every-minute, schedule: "every 1m", target: {noop: {}}}
  - id: fanned
    schedule: "every 1m"
    fanout: {count: 3, spread: 30s}
    retry: {max_attempts: 3, min_backoff: 1s}
    triggers: [downstream]
    target: {noop: {}}
  - {id: downstream, schedule: triggered, overlap: buffer_all, target: {noop: {}}}
"""
NEW_FEATURES = """
calendars:
  holidays: {timezone: UTC, dates: ["2026-12-25"]}
jobs:
  - {id: excluding, schedule: "every 1m", exclude: [holidays], target: {noop: {}}}
  - {id: replacing, schedule: "every 1m", overlap: replace, target: {noop: {}}}
  - {id: on-failure, schedule: "every 1m", triggers: [{job: excluding, on: failed}], target: {noop: {}}}
  - {id: labelled, schedule: "every 1m", labels: {team: data}, description: "d", target: {noop: {}}}
"""


def _stored_rows(tmp_path: Path, text: str, tuning: Tuning) -> dict[str, tuple[dict, dict]]:
    """Import `text` as project proj, run it 90 s with every fan-out event still under
    way (no target answers it yet), and return each job's stored (record, definition)."""
    h = Harness(tmp_path, tuning, sqlite=True)
    config = parse_project_text("proj", text, "proj.yaml")
    assert not config.job_errors, config.job_errors
    jobs = tuple(JobSnapshot(job.id, job.policy, job.definition, job.disabled) for job in config.jobs)
    h.engine.configs.import_project(ProjectSnapshot("proj", "c1", jobs=jobs))
    h.run_until(START + timedelta(seconds=75))  # the 10:01 fan-out has events yet to start
    with sqlite3.connect(tmp_path / "sundial.db") as db:
        rows = db.execute("SELECT job_id, record, definition FROM jobs WHERE project = 'proj'").fetchall()
    return {job_id: (json.loads(record), json.loads(definition)) for job_id, record, definition in rows}


def _read_by_release(items: list[tuple[str, dict]]) -> list[dict]:
    """Each (kind, stored dict) as release 0.1.0 reads it: {"read": ...} or {"error": ...}."""
    given = json.dumps([{"kind": kind, "data": data} for kind, data in items])
    done = subprocess.run([sys.executable, str(RELEASE / "read.py")], input=given, capture_output=True,
                          text=True, check=True, cwd=RELEASE, env={"PYTHONPATH": str(RELEASE)})
    return json.loads(done.stdout)


def test_with_the_switch_off_the_release_before_reads_every_record_and_plain_definition(tmp_path):
    stored = _stored_rows(tmp_path, PLAIN, OFF)
    record, _ = stored["fanned"]
    [entry] = record["active"]
    assert record["version"] == 1 and entry["event_count"] == 3 and len(entry["attempts"]) == 3
    items = [(kind, data) for record, definition in stored.values()
             for kind, data in (("record", record), ("definition", definition))]
    answers = _read_by_release(items)
    assert [answer.get("error") for answer in answers] == [None] * len(items)
    for (kind, data), answer in zip(items, answers):
        if kind == "definition":
            assert answer["read"] == data  # nothing lost or changed
        else:  # every field that release knows reads back as written
            assert all(data[key] == value for key, value in answer["read"].items()
                       if key not in ("policy", "active")), data["job_id"]
            assert [a["id"] for a in answer["read"]["active"]] == [a["id"] for a in data["active"]]
    read_entry = answers[items.index(("record", record))]["read"]["active"][0]
    assert (read_entry["attempts"], read_entry["done"]) == (entry["attempts"], entry["done"])


def test_with_the_switch_off_a_definition_with_a_field_added_since_is_refused_by_name(tmp_path):
    stored = _stored_rows(tmp_path, NEW_FEATURES, OFF)
    records = [("record", record) for record, _ in stored.values()]
    definitions = {job_id: ("definition", definition) for job_id, (_, definition) in stored.items()}
    # Their records are read, but for the new overlap value: what they ask beyond 0.1.0's
    # policy (the calendar, the condition) is not in what it reads, so it would not honour it.
    read = dict(zip(stored, _read_by_release(records)))
    assert read["replacing"] == {"error": "ValueError: 'replace' is not a valid Overlap"}
    assert {job_id for job_id, answer in read.items() if "read" in answer} == {"excluding", "on-failure", "labelled"}
    assert "exclude" not in read["excluding"]["read"]["policy"]
    answers = dict(zip(definitions, _read_by_release(list(definitions.values()))))
    assert "unknown field(s) exclude" in answers["excluding"]["error"]
    assert "'replace' is not a valid Overlap" in answers["replacing"]["error"]
    assert "triggers is {'job': 'excluding', 'on': 'failed'}, not a str" in answers["on-failure"]["error"]
    assert "unknown field(s) description, labels" in answers["labelled"]["error"]


def test_with_the_switch_on_a_fanout_under_way_is_written_at_version_2_which_the_release_before_refuses(tmp_path):
    stored = _stored_rows(tmp_path, PLAIN, ON)
    record, _ = stored["fanned"]
    assert record["version"] == 2 and record["active"][0]["events_in_rows"] is True
    [answer] = _read_by_release([("record", record)])
    assert answer == {"error": "ValueError: job record version 2 is not 1"}
    # A record with nothing in rows is still written at version 1, and read.
    plain, _ = stored["every-minute"]
    assert plain["version"] == 1 and "read" in _read_by_release([("record", plain)])[0]


def test_this_release_reads_the_next_version_and_writes_back_the_fields_it_does_not_know(tmp_path):
    """Readers one release ahead: what the next release may write (version 3, fields
    added anywhere in the record, an active entry, the policy or the definition) is read
    here, and survives a step of this release and its store's spelling of the record."""
    record, definition = _stored_rows(tmp_path, PLAIN, ON)["fanned"]
    later = json.loads(json.dumps(record))
    later.update(version=3, sla={"within_ms": 5000})
    later["active"][0]["priority"] = 7
    later["policy"]["sla_ms"] = 5000
    read = record_from_dict(later)
    assert record_to_dict(read) == later
    paused = step(read, ev.Paused("rolled back"), START + timedelta(seconds=80)).record
    written = json.loads(RecordCache().record_text(paused))
    assert (written["version"], written["sla"], written["policy"]["sla_ms"]) == (3, {"within_ms": 5000}, 5000)
    assert written["paused"] and written["active"][0]["priority"] == 7
    assert JobDefinition.from_dict({**definition, "sla": "5m"}).to_dict() == {**definition, "sla": "5m"}
