"""The one place where exceptions become HTTP answers: `{"error": {"code", "message"}}`."""

from __future__ import annotations

from flask import Flask, jsonify

from engine.service import NotFound
from statemachine.machine import InvalidTransition

STATUS = {
    "INVALID_ARGUMENT": 400,
    "UNAUTHENTICATED": 401,
    "PERMISSION_DENIED": 403,
    "NOT_FOUND": 404,
    "ALREADY_EXISTS": 409,
    "FAILED_PRECONDITION": 409,
    "PAYLOAD_TOO_LARGE": 413,
}


class ApiError(Exception):
    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code, self.message = code, message


def error_response(code: str, message: str):
    return jsonify({"error": {"code": code, "message": message}}), STATUS.get(code, 500)


def install(app: Flask) -> None:
    app.register_error_handler(ApiError, lambda e: error_response(e.code, e.message))
    app.register_error_handler(NotFound, lambda e: error_response("NOT_FOUND", str(e)))
    app.register_error_handler(InvalidTransition, lambda e: error_response(e.code, str(e)))
    app.register_error_handler(404, lambda e: error_response("NOT_FOUND", "no such resource"))
    app.register_error_handler(405, lambda e: error_response("INVALID_ARGUMENT", "method not allowed"))
