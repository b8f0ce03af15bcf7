"""The one place where exceptions become HTTP answers: `{"error": {"code", "message"}}`."""

from __future__ import annotations

import logging

from flask import Flask, jsonify, request
from werkzeug.exceptions import HTTPException

from config.limits import MAX_REQUEST_BYTES
from engine.operations import Refused
from engine.ports import StoreError
from engine.service import NotFound
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
    "INTERNAL": 500,
    "UNAVAILABLE": 503,
}

# Werkzeug's own refusals (routing, body size, malformed requests) in the API's words.
_HTTP_CODES = {400: "INVALID_ARGUMENT", 404: "NOT_FOUND", 413: "PAYLOAD_TOO_LARGE"}


class ApiError(Exception):
    def __init__(self, code: str, message: str, details: list[str] | None = None):
        super().__init__(message)
        self.code, self.message, self.details = code, message, details or []


def error_response(code: str, message: str, details: list[str] | None = None):
    body = {"code": code, "message": message}
    if details:
        body["details"] = details
    return jsonify({"error": body}), STATUS.get(code, 500)


def _http_error(error: HTTPException):
    if error.code == 405:
        # A method the path does not have: HTTP's own answer, with its Allow header.
        response, _ = error_response("METHOD_NOT_ALLOWED", f"{request.method} is not allowed here")
        response.headers["Allow"] = ", ".join(error.valid_methods or ())
        return response, 405
    if error.code == 413:
        return error_response("PAYLOAD_TOO_LARGE", f"the request body is larger than "
                                                   f"{MAX_REQUEST_BYTES:,} bytes, the limit")
    code = _HTTP_CODES.get(error.code, "INVALID_ARGUMENT" if (error.code or 500) < 500 else "INTERNAL")
    message = "no such resource" if error.code == 404 else (error.description or error.name)
    response, _ = error_response(code, message)
    return response, error.code


def _unexpected(error: Exception):
    # With the traceback: this is a bug to fix, not a request to refuse.
    log.error("api error", exc_info=error, extra={"fields": {"path": request.path}})
    return error_response("INTERNAL", "internal error; the server's log has the details")


def install(app: Flask) -> None:
    app.register_error_handler(ApiError, lambda e: error_response(e.code, e.message, e.details))
    app.register_error_handler(Refused, lambda e: error_response(e.code, str(e)))
    app.register_error_handler(NotFound, lambda e: error_response("NOT_FOUND", str(e)))
    app.register_error_handler(InvalidTransition, lambda e: error_response(e.code, str(e)))
    app.register_error_handler(StoreError, lambda e: error_response("UNAVAILABLE", f"storage: {e}"))
    app.register_error_handler(HTTPException, _http_error)
    app.register_error_handler(Exception, _unexpected)
