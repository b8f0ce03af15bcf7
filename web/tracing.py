"""Ties the log lines written while a request is handled to that request's trace.

Google's front ends (App Engine, Cloud Run, Cloud Tasks' calls) send
`X-Cloud-Trace-Context`; other tracers send W3C `traceparent`. The fields go in a
context variable that engine/logs.py's formatter adds to every line, set before the
request's first hook runs and cleared when it ends (waitress reuses its threads).
"""

from __future__ import annotations

from flask import Flask, g, request
from werkzeug.datastructures import Headers

from engine.logs import trace_fields, trace_of


def _trace_headers(headers: Headers) -> dict[str, str]:
    return {name: headers.get(name, "") for name in ("X-Cloud-Trace-Context", "traceparent")}


def install(app: Flask, project: str) -> None:
    """`project`: the Google Cloud project traces are named in (GOOGLE_CLOUD_PROJECT)."""

    def _start_trace() -> None:
        g.sundial_trace = trace_fields.set(trace_of(_trace_headers(request.headers), project))

    def _end_trace(error: BaseException | None = None) -> None:
        token = g.pop("sundial_trace", None)
        if token is not None:
            trace_fields.reset(token)

    # First of all hooks, so a request refused by a later hook is traced too.
    app.before_request_funcs.setdefault(None, []).insert(0, _start_trace)
    app.teardown_request(_end_trace)
