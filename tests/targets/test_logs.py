"""Structured logs: one JSON object per line with Cloud Logging's time, severity and message, and fields."""

from __future__ import annotations

import io
import logging
import re
from datetime import datetime, timedelta, timezone

import pytest

from engine.logs import SPAN_KEY, TRACE_KEY, configure_logging, log_event, trace_fields, trace_of

TIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")


def test_log_event_writes_one_json_object_with_fields(log_lines):
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
    [entry] = log_lines()
    assert TIME.match(entry.pop("time"))
    assert entry == {
        "severity": "INFO",
        "message": "delivered",
        "logger": "sundial.dispatch",
        "job": "billing/exporter-hourly",
        "invocation": "inv-0001",
        "scheduled_time": "2018-03-22T00:09:00.000Z",
        "lateness_ms": 12,
        "outcome": "succeeded",
    }


def test_extra_fields_levels_and_multiline_messages(log_lines):
    log = logging.getLogger("sundial.test")
    log.warning("slow\nstart", extra={"fields": {"took": timedelta(seconds=1.5)}})
    log.debug("plain %s", "args")
    log_event(log, "dropped", level=logging.ERROR, severity="x", event=0)
    first, second, third = log_lines()
    assert (first["severity"], first["message"], first["took"]) == ("WARNING", "slow\nstart", 1500)
    assert (second["severity"], second["message"]) == ("DEBUG", "plain args")
    # A field named like one of the line's own keys does not overwrite it; others keep their names.
    assert (third["message"], third["field_severity"], third["severity"]) == ("dropped", "x", "ERROR")
    assert third["event"] == 0


def test_exceptions_are_kept_on_the_same_line(log_lines):
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        logging.getLogger("sundial.test").exception("failed")
    [entry] = log_lines()
    assert entry["message"] == "failed"
    assert "RuntimeError: boom" in entry["stack_trace"]  # where Error Reporting looks


@pytest.mark.parametrize("headers, project, expected", [
    ({"X-Cloud-Trace-Context": "105445AA7843BC8BF206B12000100000/1;o=1"}, "acme",
     {TRACE_KEY: "projects/acme/traces/105445aa7843bc8bf206b12000100000", SPAN_KEY: "0000000000000001"}),
    ({"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}, "acme",
     {TRACE_KEY: "projects/acme/traces/0af7651916cd43dd8448eb211c80319c", SPAN_KEY: "b7ad6b7169203331"}),
    ({"X-Cloud-Trace-Context": "0af7651916cd43dd8448eb211c80319c"}, "",
     {"trace_id": "0af7651916cd43dd8448eb211c80319c"}),
    ({"traceparent": "00-00000000000000000000000000000000-b7ad6b7169203331-01"}, "acme", {}),
    ({"X-Cloud-Trace-Context": "not-a-trace"}, "acme", {}),
    ({}, "acme", {}),
])
def test_trace_headers(headers, project, expected):
    assert trace_of(headers, project) == expected


def test_lines_carry_the_trace_of_the_request_being_handled(log_lines):
    token = trace_fields.set({TRACE_KEY: "projects/acme/traces/abc"})
    try:
        logging.getLogger("sundial.test").info("inside")
    finally:
        trace_fields.reset(token)
    logging.getLogger("sundial.test").info("outside")
    inside, outside = log_lines()
    assert inside[TRACE_KEY] == "projects/acme/traces/abc"
    assert TRACE_KEY not in outside


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


def test_a_line_is_formatted_before_the_handlers_lock_is_taken():
    # Sender threads each log a delivery: formatting under the lock made them queue
    # there for one another's JSON encoding.
    stream = io.StringIO()
    handler = configure_logging(stream)
    held_while_formatting = []
    formatter = handler.formatter
    assert formatter is not None

    class Watching(logging.Formatter):
        def format(self, record):
            held_while_formatting.append(handler.lock._is_owned())  # type: ignore[union-attr]
            return formatter.format(record)

    handler.setFormatter(Watching())
    try:
        log_event(logging.getLogger("sundial.test"), "delivered", job="p/j")
    finally:
        logging.getLogger().removeHandler(handler)
    assert held_while_formatting == [False]
    assert '"message": "delivered"' in stream.getvalue() and '"job": "p/j"' in stream.getvalue()
