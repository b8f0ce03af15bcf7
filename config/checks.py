"""The small checks every config field is made of, and how their errors are worded.

A `Checker` collects the errors of one scope (the file's top level, or one job entry).
A check that finds a problem calls `fail`, which records the error and raises `Invalid`
so the caller can drop that one field and go on checking the others: a user sees every
problem of a file in one run of `validate`, not one per run.

Messages start with the field's name relative to the scope (`retry.max_attempts: ...`),
after the scope's label (`job 'exporter': `), so each line stands on its own in a log.
"""

from __future__ import annotations

import difflib
from datetime import date, datetime, timedelta
from typing import Any, Callable, Iterable, NoReturn

from config.model import ConfigError
from config.yamlsource import LineMap, Path
from statemachine.durations import DurationError, format_duration, parse_duration

__all__ = ["Checker", "Invalid", "Parser", "describe_value"]


class Invalid(Exception):
    """A field failed its check; its error is already recorded."""


class Checker:
    """Errors of one scope: `base` is the scope's path in the document, `label` its name."""

    def __init__(self, filename: str, lines: LineMap, base: Path = (), label: str = "",
                 job: str = "") -> None:
        self.filename = filename
        self.lines = lines
        self.base = tuple(base)
        self.label = label
        self.job = job
        self.errors: list[ConfigError] = []

    # --- recording -------------------------------------------------------------------

    def name(self, path: Path) -> str:
        """`retry.max_attempts`, `headers.Accept`, `at[2]`: the path below the scope."""
        text = ""
        for part in tuple(path)[len(self.base):]:
            text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else part)
        return text

    def report(self, path: Path, message: str, *, named: bool = True) -> None:
        """Record an error about the field at `path` (prefixed with its name if `named`)."""
        field = self.name(path)
        text = f"{field}: {message}" if named and field else message
        self.errors.append(ConfigError(self.filename, self.lines.line(path),
                                       self.label + text, job=self.job))

    def fail(self, path: Path, message: str, *, named: bool = True) -> NoReturn:
        self.report(path, message, named=named)
        raise Invalid(message)

    def attempt(self, parse: Callable[[], Any], fallback: Any = None) -> Any:
        """Run one field's check; `fallback` if it failed (its error is recorded)."""
        try:
            return parse()
        except Invalid:
            return fallback

    # --- shapes ----------------------------------------------------------------------

    def mapping(self, path: Path, value: Any, example: str = "") -> dict[str, Any]:
        if not isinstance(value, dict):
            hint = f", e.g. {example}" if example else ""
            self.fail(path, f"expected a map{hint}, got {describe_value(value)}")
        return value

    def listing(self, path: Path, value: Any) -> list[Any]:
        if not isinstance(value, list):
            self.fail(path, f"expected a list, got {describe_value(value)}")
        return value

    def known_fields(self, path: Path, value: dict[str, Any], known: Iterable[str]) -> None:
        """Report (without raising) each field of `value` that is not in `known`."""
        unknown = [key for key in value if key not in known] if isinstance(known, (tuple, dict, frozenset)) \
            else list(value)  # most maps have no unknown field: `known` is listed only for one that does
        if not unknown:
            return
        known = list(known)
        for key in unknown:
            if key in known:
                continue
            where = self.name(path + (key,))
            close = difflib.get_close_matches(key, known, n=1, cutoff=0.7)  # typos only
            hint = (f" (did you mean '{close[0]}'?)" if close
                    else f"; expected one of: {', '.join(known)}")
            self.report(path + (key,), f"unknown field '{where}'{hint}", named=False)

    # --- scalars ---------------------------------------------------------------------

    def string(self, path: Path, value: Any, *, empty: bool = True) -> str:
        if not isinstance(value, str):
            quote = "; quote it" if isinstance(value, (int, float, date)) else ""
            self.fail(path, f"expected a string, got {describe_value(value)}{quote}")
        if not empty and not value.strip():
            self.fail(path, "must not be empty")
        return value

    def boolean(self, path: Path, value: Any) -> bool:
        if not isinstance(value, bool):
            self.fail(path, f"expected true or false, got {describe_value(value)}")
        return value

    def integer(self, path: Path, value: Any, low: int, high: int | None = None) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            self.fail(path, f"expected a whole number, got {describe_value(value)}")
        if value < low or (high is not None and value > high):
            bounds = f"between {low} and {high}" if high is not None else f"{low} or more"
            self.fail(path, f"must be {bounds}, got {value}")
        return value

    def duration(self, path: Path, value: Any, *, positive: bool = False) -> timedelta:
        if not isinstance(value, str):
            self.fail(path, f"expected a duration such as '90s' or '1h30m', "
                            f"got {describe_value(value)}")
        try:
            parsed = parse_duration(value)
        except DurationError as error:
            self.fail(path, str(error))
        if parsed % timedelta(milliseconds=1):
            self.fail(path, f"{value!r} is finer than a millisecond")
        if positive and parsed <= timedelta(0):
            self.fail(path, f"must be more than 0s, got {format_duration(parsed)}")
        return parsed

    def choice(self, path: Path, value: Any, choices: Iterable[str]) -> str:
        choices = list(choices)
        if not isinstance(value, str) or value not in choices:
            shown = repr(value) if isinstance(value, str) else describe_value(value)
            self.fail(path, f"{shown} is not one of {', '.join(choices)}")
        return value


Parser = Callable[[Checker, Path, Any], Any]


def describe_value(value: Any) -> str:
    """`string 'x'`, `integer 3`, `a map`: how a value is named in an error."""
    if value is None:
        return "nothing (null)"
    if isinstance(value, bool):
        return f"boolean {str(value).lower()}"
    if isinstance(value, int):
        return f"integer {value}"
    if isinstance(value, float):
        return f"number {value}"
    if isinstance(value, str):
        return f"string {value!r}"
    if isinstance(value, datetime):
        return f"timestamp {value.isoformat()}"
    if isinstance(value, date):
        return f"date {value.isoformat()}"
    if isinstance(value, dict):
        return "a map"
    if isinstance(value, list):
        return "a list"
    return type(value).__name__
