"""Run by tests/upgrade/test_rollback.py with this folder first on sys.path: reads each
stored dict on stdin (a JSON list of {"kind": "record"|"definition", "data": {...}})
with release 0.1.0's own readers, and prints one JSON answer per input: what the release
reads back (its own serialization of it) or the error it raises."""

import json
import sys

import statemachine
from statemachine.definition import JobDefinition
from statemachine.record import record_from_dict, record_to_dict


def read(kind: str, data: dict) -> dict:
    try:
        if kind == "record":
            return {"read": record_to_dict(record_from_dict(data))}
        return {"read": JobDefinition.from_dict(data).to_dict()}
    except Exception as error:  # what the release would do with it: refuse it
        return {"error": f"{type(error).__name__}: {error}"}


if __name__ == "__main__":
    assert "release_0_1_0" in statemachine.__file__, statemachine.__file__
    print(json.dumps([read(item["kind"], item["data"]) for item in json.load(sys.stdin)]))
