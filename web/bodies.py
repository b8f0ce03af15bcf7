"""Reading API request bodies: JSON objects with known fields, or clear 400s.

The size limit (config.limits.MAX_REQUEST_BYTES) is Flask's MAX_CONTENT_LENGTH, set
by the app factory: reading a larger body raises 413, which web/errors.py words (and
the HTTP server refuses a body past it before it is read: cli/serve.py). JSON nested
deeper than MAX_DEPTH levels (the config files' bound) is a 400 before it is parsed:
Python's parser would otherwise recurse until it fails with a 500.
"""

from __future__ import annotations

import json
import re
from datetime import datetime
from typing import Any, NoReturn

from flask import request

from config.yamlsource import MAX_DEPTH
from statemachine.durations import parse_instant
from web.errors import ApiError


def _no_constants(name: str) -> NoReturn:
    # Python's json reads NaN and Infinity; JSON has neither.
    raise ValueError(f"{name} is not JSON")


def raw_text() -> str:
    try:
        return request.get_data(cache=True).decode("utf-8")
    except UnicodeDecodeError as error:
        raise ApiError("INVALID_ARGUMENT", f"the request body is not UTF-8: {error}") from None


def json_object(optional: bool = False) -> dict[str, Any]:
    """The body as a JSON object; an empty body is `{}` when `optional`."""
    text = raw_text()
    if not text.strip():
        if optional:
            return {}
        raise ApiError("INVALID_ARGUMENT", "the request needs a JSON object as its body")
    if nesting_depth(text) > MAX_DEPTH:
        raise ApiError("INVALID_ARGUMENT", f"the request body is nested more than {MAX_DEPTH} "
                                           "levels deep")
    try:
        value = json.loads(text, parse_constant=_no_constants)
    except ValueError as error:
        raise ApiError("INVALID_ARGUMENT", f"the request body is not valid JSON: {error}") from None
    if not isinstance(value, dict):
        raise ApiError("INVALID_ARGUMENT", f"the request body must be a JSON object, "
                                           f"got {type(value).__name__}")
    return value


_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_BRACKET = re.compile(r"[\[\]{}]")


def nesting_depth(text: str) -> int:
    """How deep [ and { nest in JSON text (brackets in strings do not count); 0 when it
    cannot pass MAX_DEPTH."""
    if text.count("[") + text.count("{") <= MAX_DEPTH:
        return 0  # cannot nest deeper than it opens: most bodies stop here
    depth = deepest = 0
    for match in _BRACKET.finditer(_STRING.sub("", text)):
        depth += 1 if match.group() in "[{" else -1
        deepest = max(deepest, depth)
    return deepest


def fields(body: dict[str, Any], allowed: dict[str, type]) -> dict[str, Any]:
    """`body` checked to have only `allowed` fields, each of its type (or null)."""
    unknown = sorted(set(body) - set(allowed))
    if unknown:
        raise ApiError("INVALID_ARGUMENT", f"unknown field {unknown[0]!r}; known fields: "
                                           f"{', '.join(allowed) or 'none'}")
    for name, kind in allowed.items():
        value = body.get(name)
        if value is not None and (not isinstance(value, kind) or isinstance(value, bool) and kind is not bool):
            raise ApiError("INVALID_ARGUMENT", f"{name}: expected {_kind_name(kind)}, "
                                               f"got {json.dumps(value)[:40]}")
    return body


def text(body: dict[str, Any], name: str, limit: int) -> str:
    """A string field, at most `limit` characters; '' when absent."""
    value: str = body.get(name) or ""  # a str: `fields` has checked the body's types
    if len(value) > limit:
        raise ApiError("INVALID_ARGUMENT", f"{name}: {len(value):,} characters; at most "
                                           f"{limit:,} are allowed")
    return value


def instant(body: dict[str, Any], name: str) -> datetime:
    """A required RFC 3339 field (with an offset or Z), in UTC."""
    found = optional_instant(body, name)
    if found is None:
        raise ApiError("INVALID_ARGUMENT", f"{name}: required, an RFC 3339 time such as 2026-01-05T10:00:00Z")
    return found


def optional_instant(body: dict[str, Any], name: str) -> datetime | None:
    """An RFC 3339 field (with an offset or Z), in UTC; None when absent."""
    value = body.get(name)
    if value is None:
        return None
    try:
        return parse_instant(value)
    except ValueError as error:
        raise ApiError("INVALID_ARGUMENT", f"{name}: {error}") from None


def _kind_name(kind: type) -> str:
    return {str: "a string", bool: "true or false", int: "a whole number", dict: "an object",
            list: "a list"}.get(kind, kind.__name__)
