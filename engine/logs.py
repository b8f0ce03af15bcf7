"""Structured logs: one JSON object per line, so a log service can filter on fields.

    log_event(logger, "delivered", job="p/j", invocation="...", outcome="succeeded")
    -> {"time": "2018-03-22T00:09:00.123Z", "level": "INFO", "event": "delivered",
        "logger": "sundial.dispatch", "job": "p/j", "invocation": "...", ...}

Plain `logger.info("text")` calls work too; fields go in `extra={"fields": {...}}`.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from datetime import date, datetime, timedelta
from typing import TextIO

from statemachine.durations import rfc3339_millis

_RESERVED = ("time", "level", "event", "logger", "error")


class JsonFormatter(logging.Formatter):
    # (second, "2018-03-22T00:09:00"): most lines fall in the same second as the last,
    # and formatting a datetime was a fair part of a delivery's log line.
    _second: tuple[int, str] = (-1, "")

    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": self._time(record.created),
            "level": record.levelname,
            "event": record.getMessage(),
            "logger": record.name,
        }
        fields = getattr(record, "fields", None)
        for name, value in (fields if isinstance(fields, dict) else {}).items():
            # A field may not overwrite the line's own keys; keep it under another name.
            entry[f"field_{name}" if name in _RESERVED else str(name)] = value
        if record.exc_info:
            entry["error"] = self.formatException(record.exc_info)
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
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(JsonFormatter())
    handler._sundial_json = True  # type: ignore[attr-defined]
    root.addHandler(handler)
    root.setLevel(level.upper() if isinstance(level, str) else level)
    return handler


def log_event(logger: logging.Logger, event: str, /, level: int = logging.INFO, **fields) -> None:
    """Log `event` with `fields` as top-level JSON keys (`level` picks the level)."""
    logger.log(level, event, extra={"fields": fields})
