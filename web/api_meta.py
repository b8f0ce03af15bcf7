"""POST /api/v1/validate and GET /api/v1/openapi.json (docs/REFERENCE.md section 5)."""

from __future__ import annotations

from flask import Blueprint, current_app, jsonify, request
from flask.typing import ResponseReturnValue

from config.loader import validate_text
from config.model import PROJECT_ID
from engine.errors import NotFound
from web.access import readable
from web.bodies import raw_text
from web.context import queries
from web.errors import ApiError
from web.openapi import openapi_document

meta_api = Blueprint("api_meta", __name__, url_prefix="/api/v1")


@meta_api.post("/validate")
def validate() -> ResponseReturnValue:
    """Every error of a project config (YAML, or JSON, which YAML reads too), by line.

    `?project=ID` also checks the id, as the file name `ID.yaml` would be checked, and,
    for a project the caller may read, the service accounts the operator grants it: for
    any other, what it is granted is not the caller's to learn (checked as without a project).
    """
    project = request.args.get("project")
    if project is not None and not PROJECT_ID.fullmatch(project):
        raise ApiError("INVALID_ARGUMENT", f"project {project!r} is not a valid project id: "
                                           "1 to 63 lower-case letters, digits or '-'")
    settings = current_app.config["SUNDIAL_SETTINGS"]  # the server's grant, as its imports use it
    errors = validate_text(raw_text(), "<request>", project_id=project if _readable(project) else None,
                           backend=settings.backend, own=settings.own_service)
    return jsonify({"errors": [{"line": error.line, "message": error.message} for error in errors]})


def _readable(project: str | None) -> bool:
    if project is None:
        return False
    try:
        return readable(queries().project(project))
    except NotFound:
        return False


@meta_api.get("/openapi.json")
def openapi() -> ResponseReturnValue:
    return jsonify(openapi_document())
