"""POST /api/v1/validate and GET /api/v1/openapi.json (docs/REFERENCE.md section 5)."""

from __future__ import annotations

from flask import Blueprint, current_app, jsonify, request

from config.loader import validate_text
from config.model import PROJECT_ID
from web.bodies import raw_text
from web.errors import ApiError
from web.openapi import openapi_document

meta_api = Blueprint("api_meta", __name__, url_prefix="/api/v1")


@meta_api.post("/validate")
def validate():
    """Every error of a project config (YAML, or JSON, which YAML reads too), by line.

    `?project=ID` also checks the id, as the file name `ID.yaml` would be checked.
    """
    project = request.args.get("project")
    if project is not None and not PROJECT_ID.fullmatch(project):
        raise ApiError("INVALID_ARGUMENT", f"project {project!r} is not a valid project id: "
                                           "1 to 63 lower-case letters, digits or '-'")
    backend = current_app.config["SUNDIAL_SETTINGS"].backend
    errors = validate_text(raw_text(), "<request>", project_id=project, backend=backend)
    return jsonify({"errors": [{"line": error.line, "message": error.message} for error in errors]})


@meta_api.get("/openapi.json")
def openapi():
    return jsonify(openapi_document())
