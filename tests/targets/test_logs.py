"""Structured logs: one JSON object per line with Cloud Logging's time, severity and message, and fields."""

from __future__ import annotations

import io
import json
import logging
import re
import sys
import threading
import warnings
from contextlib import contextmanager
from datetime import date, datetime, timedelta, timezone

import pytest

from engine.logs import (
    SOURCE_KEY,
    SPAN_KEY,
    TRACE_KEY,
    configure_logging,
    log_event,
    log_everything_as_json,
    trace_fields,
    trace_of,
)

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


# --- everything a serving process writes to stderr ------------------------------------

@pytest.fixture
def process_lines():
    """log_everything_as_json as a serving process calls it, into a buffer; Python's
    hooks and the levels put back afterwards. Call it to read the lines."""
    saved = (warnings.showwarning, sys.excepthook, threading.excepthook, sys.unraisablehook)
    stream = io.StringIO()
    with levels_kept():
        handler = log_everything_as_json("INFO", stream)
        yield lambda: [json.loads(line) for line in stream.getvalue().splitlines()]
        warnings.showwarning, sys.excepthook, threading.excepthook, sys.unraisablehook = saved
        logging.getLogger().removeHandler(handler)


@contextmanager
def levels_kept():
    """The levels configure_logging sets (the root's, Sundial's and Google's), put back."""
    touched = [logging.getLogger(name) for name in ("", "sundial", "google")]
    levels = [logger.level for logger in touched]
    try:
        yield
    finally:
        for logger, level in zip(touched, levels):
            logger.setLevel(level)


def test_a_google_librarys_future_warning_is_one_json_line(process_lines):
    # The warning issue 31 saw: google.api_core warns, as each Google client is imported,
    # of the Python version's end of support (a date far ahead makes it warn on any version).
    from google.api_core._python_version_support import check_python_version

    with warnings.catch_warnings():
        warnings.simplefilter("always")
        check_python_version("google.cloud.ndb", today=date(2100, 1, 1))
    entries = process_lines()  # (importing google.api_core may have warned of this Python already)
    assert entries and "google.cloud.ndb" in entries[-1]["message"]
    for entry in entries:
        assert (entry["severity"], entry["logger"], entry["category"]) == ("WARNING", "py.warnings", "FutureWarning")
        assert "Python version" in entry["message"] and "\n" not in entry["message"]
        assert TIME.match(entry["time"])
        where = entry[SOURCE_KEY]
        assert where["file"].endswith("_python_version_support.py") and where["line"].isdigit()


def test_a_warning_written_to_a_file_of_its_own_stays_there(process_lines):
    # warnings.showwarning(file=...) is a caller asking for that file: not a log line.
    chosen = io.StringIO()
    warnings.showwarning("to the file", UserWarning, "x.py", 3, file=chosen)
    assert "UserWarning: to the file" in chosen.getvalue()
    assert process_lines() == []


def test_an_uncaught_exception_in_a_thread_is_an_error_line_with_its_traceback(process_lines, capsys):
    def fail():
        raise ValueError("thread broke")

    worker = threading.Thread(target=fail, name="sundial-worker-7")
    worker.start()
    worker.join()
    [entry] = process_lines()
    assert (entry["severity"], entry["thread"]) == ("ERROR", "sundial-worker-7")
    assert entry["message"] == "uncaught exception in a thread: ValueError: thread broke"
    assert "Traceback" in entry["stack_trace"] and "in fail" in entry["stack_trace"]
    assert capsys.readouterr().err == ""


def test_the_exception_that_ends_the_process_is_its_last_line(process_lines, capsys):
    try:
        raise OSError(98, "Address already in use")
    except OSError:
        sys.excepthook(*sys.exc_info())
    [entry] = process_lines()
    assert entry["severity"] == "CRITICAL"
    assert entry["message"] == "uncaught exception: OSError: [Errno 98] Address already in use"
    assert "OSError" in entry["stack_trace"]
    assert capsys.readouterr().err == ""


def test_an_exception_python_ignores_is_a_line_too(process_lines, capsys):
    class Leaky:
        def __del__(self):
            raise RuntimeError("in a finalizer")

    Leaky()  # dropped at once: __del__ raises where nothing can catch it
    [entry] = process_lines()
    assert entry["severity"] == "ERROR" and "RuntimeError: in a finalizer" in entry["message"]
    assert "Leaky" in entry["object"] and "in __del__" in entry["stack_trace"]
    assert capsys.readouterr().err == ""


def test_a_record_that_cannot_be_formatted_is_a_json_line_not_a_plain_traceback(process_lines, capsys):
    # A library's slip; handed to the handler alone, since pytest's own log capture
    # raises at such a record (a test's logging mistakes fail the test).
    [handler] = [h for h in logging.getLogger().handlers if getattr(h, "_sundial_json", False)]
    handler.handle(logging.LogRecord("somelib", logging.WARNING, "lib.py", 1, "two %s %s", ("one",), None))
    [entry] = process_lines()
    assert (entry["severity"], entry["message"], entry["logger"]) == ("ERROR", "log record not written", "somelib")
    assert entry["record_message"] == "'two %s %s'" and "not enough arguments" in entry["error"]
    assert capsys.readouterr().err == ""  # the standard handler prints "--- Logging error ---" there


@pytest.mark.parametrize("level, shown", [
    ("DEBUG", ["sundial debug", "sundial info", "library info", "library warning"]),
    ("INFO", ["sundial info", "library info", "library warning"]),
    ("WARNING", ["library warning", "sundial warning", "sundial error"]),
    ("ERROR", ["sundial error"]),
])
def test_the_level_applies_to_sundials_loggers_and_libraries_never_go_below_info(level, shown):
    stream = io.StringIO()
    with levels_kept():
        handler = configure_logging(stream, level)
        mine, library = logging.getLogger("sundial.engine"), logging.getLogger("urllib3.connectionpool")
        library.debug("library debug")
        mine.debug("sundial debug")
        mine.info("sundial info")
        library.info("library info")
        library.warning("library warning")
        if level in ("WARNING", "ERROR"):
            mine.warning("sundial warning")
            mine.error("sundial error")
        logging.getLogger().removeHandler(handler)
    assert [json.loads(line)["message"] for line in stream.getvalue().splitlines()] == shown


def test_the_google_libraries_records_still_reach_the_handler_once_a_google_client_is_made(monkeypatch):
    # Making a Google API client (Datastore's, Cloud Tasks') runs client_logging's set-up
    # once per process, which stops `google.*` records at the `google` logger unless that
    # logger was configured first; google-auth's warnings then went nowhere.
    from google.api_core import client_logging

    google, root = logging.getLogger("google"), logging.getLogger()
    saved = (google.level, google.propagate, root.level)
    monkeypatch.setattr(client_logging, "_LOGGING_INITIALIZED", False)  # as in a fresh process
    google.setLevel(logging.NOTSET)
    google.propagate = True
    stream = io.StringIO()
    handler = configure_logging(stream)
    try:
        client_logging.initialize_logging()  # what a client's constructor calls
        logging.getLogger("google.auth._default").warning("no credentials found")
    finally:
        root.removeHandler(handler)
        google.setLevel(saved[0])
        google.propagate = saved[1]
        root.setLevel(saved[2])
    assert [json.loads(line)["message"] for line in stream.getvalue().splitlines()] == ["no credentials found"]
