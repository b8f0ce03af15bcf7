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
"""

from __future__ import annotations

import json
import logging
import re
import sys
import time
from contextvars import ContextVar
from datetime import date, datetime, timedelta
from typing import Mapping, TextIO

from statemachine.durations import rfc3339_millis

TRACE_KEY = "logging.googleapis.com/trace"
SPAN_KEY = "logging.googleapis.com/spanId"
_RESERVED = ("time", "severity", "message", "logger", "stack_trace", TRACE_KEY, SPAN_KEY)

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


class JsonLinesHandler(logging.StreamHandler):
    """A stream handler that formats a record before it takes the handler's lock, and
    holds the lock only to write the line. The standard handler formats under its lock:
    with a delivery logged from each of many sender threads, they queued there for the
    JSON encoding of one another's lines. The lines are the same."""

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


def _jsonable(value: object) -> object:
    if isinstance(value, datetime) and value.tzinfo is not None:
        return rfc3339_millis(value)
    if isinstance(value, (datetime, date)):
        return value.isoformat()
    if isinstance(value, timedelta):
        return round(value.total_seconds() * 1000)  # as milliseconds, like lateness_ms
    return str(value)


def configure_logging(stream: TextIO | None = None, level: str | int = "INFO") -> logging.Handler:
    """Send every log record to `stream` (stderr by default) as JSON lines.

    Calling it again replaces the handler it installed before, so lines never double.
    Returns the handler, for callers (tests) that want to remove it.
    """
    root = logging.getLogger()
    for handler in list(root.handlers):
        if getattr(handler, "_sundial_json", False):
            root.removeHandler(handler)
    handler = JsonLinesHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(JsonFormatter())
    handler._sundial_json = True  # type: ignore[attr-defined]
    root.addHandler(handler)
    root.setLevel(level.upper() if isinstance(level, str) else level)
    return handler


def log_event(logger: logging.Logger, event: str, /, level: int = logging.INFO, **fields) -> None:
    """Log `event` (the line's message) with `fields` as top-level JSON keys (`level` picks the severity)."""
    logger.log(level, event, extra={"fields": fields})
