"""Structured logs: one JSON object per line, in the shape Cloud Logging reads.

    log_event(logger, "delivered", job="p/j", invocation="...", outcome="succeeded")
    -> {"time": "2018-03-22T00:09:00.123Z", "severity": "INFO", "message": "delivered",
        "logger": "sundial.engine", "job": "p/j", "invocation": "...", ...}

`severity`, `message` and `time` are the keys Cloud Logging's structured logging takes
for the entry's own severity, summary line and timestamp; a line logged while a request
that carried a trace header is handled also carries `logging.googleapis.com/trace` (and
`.../spanId`), so Logs Explorer groups it under that request. An exception's traceback
goes in `stack_trace`, where Error Reporting looks for it.

Plain `logger.info("text")` calls work too; fields go in `extra={"fields": {...}}`.

A serving process (serve, its dispatcher children, gunicorn's workers) calls
`log_everything_as_json` first: besides the handler on the root logger, through which
every library's records pass too, Python's own writes to stderr become lines of the
same shape. A warning (`warnings.warn`, as Google's libraries warn of a Python nearing
its end of life) is a WARNING line from the `py.warnings` logger with its place in
`logging.googleapis.com/sourceLocation`; an uncaught exception is a CRITICAL line (main
thread: the process ends) or an ERROR line (another thread) with its traceback in
`stack_trace`; so is an exception Python ignores (`__del__`, a finalizer), and a record
that cannot be formatted. So a process's stderr holds nothing but JSON lines.

The threshold (`SUNDIAL_LOG_LEVEL`) applies to Sundial's own loggers (`sundial.*`);
the libraries' records pass at the same threshold but never below INFO, so DEBUG shows
Sundial's details without every HTTP connection urllib3 opens.
"""

from __future__ import annotations

import json
import logging
import re
import sys
import threading
import time
import traceback
import warnings
from contextvars import ContextVar
from datetime import date, datetime, timedelta, timezone
from types import TracebackType
from typing import Mapping, TextIO

from statemachine.durations import rfc3339_millis

TRACE_KEY = "logging.googleapis.com/trace"
SPAN_KEY = "logging.googleapis.com/spanId"
SOURCE_KEY = "logging.googleapis.com/sourceLocation"
_RESERVED = ("time", "severity", "message", "logger", "stack_trace", TRACE_KEY, SPAN_KEY)
PRODUCT_LOGGER = "sundial"  # the parent of every logger of Sundial's own
GOOGLE_LOGGER = "google"  # the parent of the Google libraries' loggers

# The trace fields of the request being handled in this thread (or task), set by the
# web layer's before_request hook; {} outside a request.
trace_fields: ContextVar[Mapping[str, str]] = ContextVar("sundial_trace_fields", default={})

_CLOUD_TRACE = re.compile(r"^([0-9a-fA-F]{32})(?:/([0-9]+))?")
_TRACEPARENT = re.compile(r"^[0-9a-f]{2}-([0-9a-f]{32})-([0-9a-f]{16})-[0-9a-f]{2}$")


def trace_of(headers: Mapping[str, str], project: str) -> dict[str, str]:
    """The trace fields a request's headers give: `X-Cloud-Trace-Context:
    TRACE_ID/SPAN_ID;o=1` (what Google's front ends and Cloud Tasks send) or W3C
    `traceparent`. Without a project the trace cannot be named the way Cloud Logging
    links it (`projects/P/traces/T`), so the id is kept under a plain `trace_id` key."""
    trace, span = "", ""
    cloud = _CLOUD_TRACE.match(headers.get("X-Cloud-Trace-Context", "") or "")
    if cloud:
        trace, span = cloud.group(1).lower(), cloud.group(2) or ""
        span = f"{int(span):016x}" if span and int(span) < 2 ** 64 else ""  # decimal there, hex here
    else:
        parent = _TRACEPARENT.match((headers.get("traceparent", "") or "").strip())
        if parent and parent.group(1) != "0" * 32:
            trace, span = parent.group(1), parent.group(2)
    if not trace:
        return {}
    fields = {TRACE_KEY: f"projects/{project}/traces/{trace}"} if project else {"trace_id": trace}
    if span and project:
        fields[SPAN_KEY] = span
    return fields


class JsonFormatter(logging.Formatter):
    # (second, "2018-03-22T00:09:00"): most lines fall in the same second as the last,
    # and formatting a datetime was a fair part of a delivery's log line.
    _second: tuple[int, str] = (-1, "")

    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": self._time(record.created),
            "severity": record.levelname,  # DEBUG, INFO, WARNING, ERROR, CRITICAL: Cloud Logging's names too
            "message": record.getMessage(),
            "logger": record.name,
        }
        entry.update(trace_fields.get())
        fields = getattr(record, "fields", None)
        for name, value in (fields if isinstance(fields, dict) else {}).items():
            # A field may not overwrite the line's own keys; keep it under another name.
            entry[f"field_{name}" if name in _RESERVED else str(name)] = value
        if record.exc_info:
            entry["stack_trace"] = self.formatException(record.exc_info)
        # json.dumps escapes newlines inside strings, so one record is always one line.
        return json.dumps(entry, default=_jsonable, ensure_ascii=False)

    def _time(self, created: float) -> str:
        second, text = self._second
        whole = int(created)
        if whole != second:
            text = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(whole))
            self._second = (whole, text)  # one tuple: threads never see half of it
        millis = min(round((created - whole) * 1_000_000) // 1000, 999)  # as datetime rounds
        return f"{text}.{millis:03d}Z"


class JsonLinesHandler(logging.StreamHandler[TextIO]):
    """A stream handler that formats a record before it takes the handler's lock, and
    holds the lock only to write the line. The standard handler formats under its lock:
    with a delivery logged from each of many sender threads, they queued there for the
    JSON encoding of one another's lines. The lines are the same."""

    _sundial_json = True  # Sundial's own: configure_logging replaces these, and no other

    def handle(self, record: logging.LogRecord) -> bool:
        if not self.filter(record):
            return False
        try:
            line = self.format(record) + self.terminator
        except RecursionError:
            raise
        except Exception:
            self.handleError(record)
            return True
        with self.lock:  # type: ignore[union-attr]  # (createLock made it)
            try:
                self.stream.write(line)
                self.stream.flush()
            except RecursionError:
                raise
            except Exception:
                self.handleError(record)
        return True

    def handleError(self, record: logging.LogRecord) -> None:
        """A record that could not be written (a library's `%s` without its argument, a
        field that will not encode): one JSON line that says so, with the record's text
        as it came and the error, where the standard handler prints a plain traceback."""
        if not logging.raiseExceptions or self.stream is None:
            return
        entry = {"time": rfc3339_millis(datetime.fromtimestamp(record.created, timezone.utc)),
                 "severity": "ERROR", "message": "log record not written", "logger": record.name,
                 "record_message": _printable(record.msg), "record_args": _printable(record.args),
                 "error": _printable(sys.exc_info()[1]), "stack_trace": traceback.format_exc()}
        with self.lock:  # type: ignore[union-attr]  # (an RLock: also when a write under it failed)
            try:
                self.stream.write(json.dumps(entry, ensure_ascii=False) + self.terminator)
                self.stream.flush()
            except Exception:
                pass  # the stream itself is what fails: nowhere left to say it


def _text(error: BaseException) -> str:
    try:
        return str(error)
    except Exception:
        return ""


def _printable(value: object) -> str:
    try:
        return repr(value)[:2000]
    except Exception:
        return f"<{type(value).__name__} without a repr>"


def _jsonable(value: object) -> object:
    if isinstance(value, datetime) and value.tzinfo is not None:
        return rfc3339_millis(value)
    if isinstance(value, (datetime, date)):
        return value.isoformat()
    if isinstance(value, timedelta):
        return round(value.total_seconds() * 1000)  # as milliseconds, like lateness_ms
    return str(value)


def json_lines_handler(stream: TextIO | None = None) -> logging.Handler:
    """The handler every line goes through: JSON to `stream` (stderr by default). Also
    the factory gunicorn.conf.py names for gunicorn's own loggers."""
    handler = JsonLinesHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(JsonFormatter())
    return handler


def configure_logging(stream: TextIO | None = None, level: str | int = "INFO") -> logging.Handler:
    """Send every log record to `stream` (stderr by default) as JSON lines: Sundial's from
    `level` up, the libraries' from `level` but never below INFO.

    Calling it again replaces the handler it installed before (or gunicorn.conf.py did),
    so lines never double. Returns the handler, for callers (tests) that want to remove it.
    """
    root = logging.getLogger()
    for handler in list(root.handlers):
        if getattr(handler, "_sundial_json", False):
            root.removeHandler(handler)
    handler = json_lines_handler(stream)
    root.addHandler(handler)
    threshold = logging.getLevelName(level.upper()) if isinstance(level, str) else level
    logging.getLogger(PRODUCT_LOGGER).setLevel(threshold)
    root.setLevel(max(threshold, logging.INFO))
    # The first Google API client a process makes stops every `google.*` logger's records
    # from reaching the root (google.api_core.client_logging), unless the `google` logger
    # was configured before: its own level is that. Otherwise google-auth's warnings, for one,
    # would be lost on the cloud backend.
    logging.getLogger(GOOGLE_LOGGER).setLevel(max(threshold, logging.INFO))
    return handler


def log_everything_as_json(level: str = "INFO", stream: TextIO | None = None) -> logging.Handler:
    """What a serving process calls first: every record, and everything Python itself
    would print on stderr (warnings, uncaught exceptions, ignored ones), as JSON lines
    to `stream` (stderr). Returns the handler, as configure_logging does."""
    handler = configure_logging(stream, level)
    send_python_output_to_logs()
    return handler


def send_python_output_to_logs() -> None:
    """Python's own writes to stderr become log records: warnings, uncaught exceptions
    (main thread and others), exceptions it ignores. gunicorn.conf.py calls it for
    gunicorn's master, whose logging gunicorn sets up itself."""
    warnings.showwarning = _log_warning
    sys.excepthook = _log_uncaught
    threading.excepthook = _log_thread_uncaught
    sys.unraisablehook = _log_unraisable


def _log_warning(message: Warning | str, category: type[Warning], filename: str, lineno: int,
                 file: TextIO | None = None, line: str | None = None) -> None:
    """warnings.showwarning: one WARNING line, its text as the message (the standard form
    has the file, the category and the source line around it, on two lines)."""
    if file is not None:
        try:
            file.write(warnings.formatwarning(message, category, filename, lineno, line))
        except OSError:
            pass  # as the standard hook: the caller's file is gone
        return
    log_event(logging.getLogger("py.warnings"), str(message), level=logging.WARNING,
              category=category.__name__, **{SOURCE_KEY: {"file": filename, "line": str(lineno)}})


ExcInfo = tuple[type[BaseException], BaseException, TracebackType | None]


def _log_uncaught(kind: type[BaseException], error: BaseException, trace: TracebackType | None) -> None:
    """sys.excepthook: the exception that ends the process, as its last line."""
    _log_exception(logging.CRITICAL, "uncaught exception", (kind, error, trace))


def _log_thread_uncaught(args: threading.ExceptHookArgs) -> None:
    """threading.excepthook: a thread's run() raised; the thread ends, the process goes on."""
    if args.exc_type is SystemExit or args.exc_value is None:
        return  # as the standard hook: a thread's SystemExit ends it quietly
    name = args.thread.name if args.thread is not None else ""
    _log_exception(logging.ERROR, "uncaught exception in a thread", (args.exc_type, args.exc_value,
                                                                    args.exc_traceback), thread=name)


def _log_unraisable(unraisable: sys.UnraisableHookArgs) -> None:
    """sys.unraisablehook: an exception Python had to ignore (in `__del__`, a callback of
    the collector, ...), which it would print as `Exception ignored in: ...`."""
    if unraisable.exc_value is None:
        return
    _log_exception(logging.ERROR, unraisable.err_msg or "exception ignored",
                   (unraisable.exc_type, unraisable.exc_value, unraisable.exc_traceback),
                   object=_printable(unraisable.object))


def _log_exception(level: int, what: str, exc_info: ExcInfo, **fields: object) -> None:
    """`what: Kind: text` as the message (what an alert shows), the traceback in
    `stack_trace` (where Error Reporting reads it)."""
    kind, error, _ = exc_info
    text = _text(error)
    message = f"{what}: {kind.__name__}" + (f": {text}" if text else "")
    logging.getLogger("sundial.process").log(level, message, exc_info=exc_info, extra={"fields": fields})


def log_event(logger: logging.Logger, event: str, /, level: int = logging.INFO, **fields: object) -> None:
    """Log `event` (the line's message) with `fields` as top-level JSON keys (`level` picks the severity)."""
    logger.log(level, event, extra={"fields": fields})
