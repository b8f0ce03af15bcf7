"""The one place where exceptions become HTTP answers: `{"error": {"code", "message"}}`
for the API and the internal handlers, and the same code and words on the UI's error
pages (web/ui.py renders them). `classify` is the table; nothing else decides a status."""

from __future__ import annotations

import logging

from flask import Flask, Response, jsonify, request
from flask.typing import ResponseReturnValue
from werkzeug.exceptions import HTTPException, MethodNotAllowed

from config.limits import MAX_REQUEST_BYTES
from engine.errors import Busy, NotFound, Refused, StoreError, WriteLockBusy
from statemachine.backfill import BackfillError
from statemachine.errors import SundialError
from statemachine.machine import InvalidTransition

log = logging.getLogger("sundial.api")

STATUS = {
    "INVALID_ARGUMENT": 400,
    "UNAUTHENTICATED": 401,
    "PERMISSION_DENIED": 403,
    "NOT_FOUND": 404,
    "ALREADY_EXISTS": 409,
    "FAILED_PRECONDITION": 409,
    "METHOD_NOT_ALLOWED": 405,
    "PAYLOAD_TOO_LARGE": 413,
    "RESOURCE_EXHAUSTED": 429,
    "INTERNAL": 500,
    "UNAVAILABLE": 503,
}

class ApiError(Refused):
    """A request the web layer refuses itself (a bad parameter, a body that does not
    validate); `details` lists each problem, e.g. one per config line."""

    def __init__(self, code: str, message: str, details: list[str] | None = None):
        super().__init__(code, message)
        self.message, self.details = message, details or []


# Every error a request may end with on purpose is a SundialError; anything else is a
# bug (INTERNAL). A Refused names its own code (only the use case that refused knows
# which rule did); the others' answers, most specific first:
ANSWERS: tuple[tuple[type[SundialError], str, str], ...] = (
    # The event is not allowed in the job's state (a paused job's trigger, a disabled
    # job's pause): the request is sound, the job is not ready for it.
    (InvalidTransition, "FAILED_PRECONDITION", "{}"),
    (NotFound, "NOT_FOUND", "{}"),
    (BackfillError, "INVALID_ARGUMENT", "{}"),  # a backfill's range or a re-run's time
    (WriteLockBusy, "UNAVAILABLE", "the database is busy: {}; try again in a moment"),
    (StoreError, "UNAVAILABLE", "storage is failing: {}; try again in a moment"),
)
# Seconds a caller told UNAVAILABLE should wait before it tries again: about a write
# lock's bounded wait, so a retry lands after a stalled holder lost its turn.
RETRY_AFTER_SECONDS = 2
KNOWN_ERRORS = (SundialError,)


def classify(error: SundialError) -> tuple[str, str, list[str]]:
    """(code, message, details) of an error Sundial raised on purpose."""
    if isinstance(error, Refused):
        return error.code, str(error), error.details if isinstance(error, ApiError) else []
    for kind, code, words in ANSWERS:
        if isinstance(error, kind):
            return code, words.format(error), []
    return "INTERNAL", str(error), []


_BY_STATUS = {404: "NOT_FOUND", 405: "METHOD_NOT_ALLOWED", 413: "PAYLOAD_TOO_LARGE"}
# What a 413 says, from Flask or from the listener before the app (app/listener.py).
TOO_LARGE = f"the request body is larger than {MAX_REQUEST_BYTES:,} bytes, the limit"


def code_of_status(status: int) -> str:
    """A refusal the server makes by its HTTP status alone, in the API's words."""
    return _BY_STATUS.get(status) or ("INVALID_ARGUMENT" if status < 500 else "INTERNAL")


def http_code(error: HTTPException) -> str:
    """Werkzeug's own refusals (routing, methods, body size, malformed requests) in the API's words."""
    return code_of_status(error.code or 500)


def error_response(code: str, message: str, details: list[str] | None = None) -> tuple[Response, int]:
    body: dict[str, str | list[str]] = {"code": code, "message": message}
    if details:
        body["details"] = details
    response = jsonify({"error": body})
    if code == "UNAVAILABLE":
        response.headers["Retry-After"] = str(RETRY_AFTER_SECONDS)
    return response, STATUS.get(code, 500)


def _http_error(error: HTTPException) -> ResponseReturnValue:
    if isinstance(error, MethodNotAllowed):  # 405
        # A method the path does not have: HTTP's own answer, with its Allow header.
        response, _ = error_response("METHOD_NOT_ALLOWED", f"{request.method} is not allowed here")
        response.headers["Allow"] = ", ".join(error.valid_methods or ())
        return response, 405
    if error.code == 413:
        return error_response("PAYLOAD_TOO_LARGE", TOO_LARGE)
    message = "no such resource" if error.code == 404 else (error.description or error.name)
    response, _ = error_response(http_code(error), message)
    # An HTTPException of no code keeps the response's own status, as Flask does with None.
    return response if error.code is None else (response, error.code)


def _unexpected(error: Exception) -> tuple[Response, int]:
    # With the traceback: this is a bug to fix, not a request to refuse.
    log.error("api error", exc_info=error, extra={"fields": {"path": request.path}})
    return error_response("INTERNAL", "internal error; the server's log has the details")


def _busy(error: Busy) -> tuple[Response, int]:
    response, status = error_response(*classify(error))
    response.headers["Retry-After"] = str(error.retry_after)  # when to come back, not how often
    return response, status


def install(app: Flask) -> None:
    for kind in KNOWN_ERRORS:
        app.register_error_handler(kind, lambda e: error_response(*classify(e)))
    app.register_error_handler(Busy, _busy)
    app.register_error_handler(HTTPException, _http_error)
    app.register_error_handler(Exception, _unexpected)
