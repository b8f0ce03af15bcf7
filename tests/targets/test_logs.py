"""Structured logs: one JSON object per line with time, level, event and fields."""

from __future__ import annotations

import io
import json
import logging
import re
from datetime import datetime, timedelta, timezone

import pytest

from engine.logs import configure_logging, log_event

TIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")


@pytest.fixture
def lines():
    stream = io.StringIO()
    root = logging.getLogger()
    level = root.level
    handler = configure_logging(stream=stream, level="DEBUG")
    yield lambda: [json.loads(line) for line in stream.getvalue().splitlines()]
    root.removeHandler(handler)
    root.setLevel(level)


def test_log_event_writes_one_json_object_with_fields(lines):
    log = logging.getLogger("sundial.dispatch")
    log_event(
        log,
        "delivered",
        job="billing/exporter-hourly",
        invocation="inv-0001",
        scheduled_time=datetime(2018, 3, 22, 0, 9, tzinfo=timezone.utc),
        lateness_ms=12,
        outcome="succeeded",
    )
    [entry] = lines()
    assert TIME.match(entry.pop("time"))
    assert entry == {
        "level": "INFO",
        "event": "delivered",
        "logger": "sundial.dispatch",
        "job": "billing/exporter-hourly",
        "invocation": "inv-0001",
        "scheduled_time": "2018-03-22T00:09:00.000Z",
        "lateness_ms": 12,
        "outcome": "succeeded",
    }


def test_extra_fields_levels_and_multiline_messages(lines):
    log = logging.getLogger("sundial.test")
    log.warning("slow\nstart", extra={"fields": {"took": timedelta(seconds=1.5)}})
    log.debug("plain %s", "args")
    log_event(log, "dropped", level=logging.ERROR, level_hint="x", event="clash")
    first, second, third = lines()
    assert (first["level"], first["event"], first["took"]) == ("WARNING", "slow\nstart", 1500)
    assert (second["level"], second["event"]) == ("DEBUG", "plain args")
    # A field named like one of the line's own keys does not overwrite it.
    assert (third["event"], third["field_event"], third["level"]) == ("dropped", "clash", "ERROR")


def test_exceptions_are_kept_on_the_same_line(lines):
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        logging.getLogger("sundial.test").exception("failed")
    [entry] = lines()
    assert entry["event"] == "failed"
    assert "RuntimeError: boom" in entry["error"]


def test_configuring_twice_does_not_double_lines():
    stream = io.StringIO()
    root = logging.getLogger()
    level = root.level
    configure_logging(stream=io.StringIO())
    handler = configure_logging(stream=stream)
    try:
        logging.getLogger("sundial.test").info("once")
        assert len(stream.getvalue().splitlines()) == 1
        assert sum(getattr(h, "_sundial_json", False) for h in root.handlers) == 1
    finally:
        root.removeHandler(handler)
        root.setLevel(level)
