"""The one place where the API and the UI decide who may do what (CONTRACT section 6).

Every endpoint that names a project calls `authorize` with the permission it needs
before it reads or changes anything; the async completion endpoint is the exception,
because its caller is a target, not a user, and proves itself with the invocation's
completion token instead. `may` asks the same question without raising, so the UI
shows only the buttons the caller may press (the POST behind each asks again).

A caller who may not read a project gets NOT_FOUND, as if it did not exist; one who
may read but not do this gets PERMISSION_DENIED.
"""

from __future__ import annotations

from typing import Mapping

from flask import Flask, current_app, g, request, session

from engine.operations import Refused
from engine.ports import ProjectRow
from engine.service import NotFound
from web.acl import OWN, READ, TRIGGER, Directory, load_directory, permissions
from web.errors import ApiError
from web.identity import IAP_HEADER, Caller, Identifier, Unauthenticated, identifier_from_settings

__all__ = ["OWN", "READ", "TRIGGER", "authorize", "caller", "install", "may", "readable"]

# Paths whose callers are not users, or not yet: the queue and cron (web/guard.py), the
# health check, the UI's stylesheet and sign-in form; the async completion carries its
# own token.
_NOT_USERS = ("/internal/", "/healthz", "/static/", "/signin", "/signout")


# Where web/signin.py keeps a browser's API token, in the signed session cookie.
SESSION_TOKEN = "sundial_api_token"


def install(app: Flask, identifier: Identifier | None = None, directory: Directory | None = None) -> None:
    """Identify every user request before its handler runs: an unknown or forged
    credential gets 401 whatever the endpoint."""
    settings = app.config["SUNDIAL_SETTINGS"]
    app.config["SUNDIAL_IDENTIFIER"] = identifier or identifier_from_settings(settings)
    app.config["SUNDIAL_DIRECTORY"] = directory or load_directory()

    @app.before_request
    def _identify():
        if request.path.startswith(_NOT_USERS) or request.path.endswith(":complete"):
            return None
        caller()
        return None


def caller() -> Caller:
    """The caller of the current request, identified once."""
    if "sundial_caller" not in g:
        try:
            g.sundial_caller = current_app.config["SUNDIAL_IDENTIFIER"].identify(_credentials())
        except Unauthenticated as error:
            raise ApiError("UNAUTHENTICATED", str(error)) from None
    return g.sundial_caller


def _credentials() -> Mapping[str, str]:
    """The request's own credentials, else the API token the UI's sign-in keeps in the
    signed session cookie (a browser cannot send a bearer token itself)."""
    headers = request.headers
    if headers.get("Authorization") or headers.get(IAP_HEADER):
        return headers
    token = session.get(SESSION_TOKEN, "")
    return {"Authorization": f"Bearer {token}"} if token else headers


def _held(project: ProjectRow) -> set[str]:
    acl = (project.settings or {}).get("acl") if project is not None else None
    return permissions(caller(), acl, current_app.config["SUNDIAL_DIRECTORY"])


def authorize(project: ProjectRow, permission: str) -> None:
    """Return if the caller has `permission` on `project`; raise ApiError otherwise."""
    held = _held(project)
    if permission in held:
        return
    if READ not in held:
        raise ApiError("NOT_FOUND", f"project {project.id!r} not found")
    raise ApiError("PERMISSION_DENIED", f"{caller().principal} may not {_VERB[permission]} "
                                        f"in project {project.id!r}")


def readable(project: ProjectRow) -> bool:
    """Whether the caller may see `project` at all (lists leave the others out)."""
    return READ in _held(project)


def may(project: ProjectRow, permission: str) -> bool:
    """Whether the caller has `permission` on `project`, without raising."""
    try:
        authorize(project, permission)
    except (ApiError, Refused, NotFound):
        return False
    return True


_VERB = {READ: "read", TRIGGER: "trigger, pause or resume jobs", OWN: "abort invocations or manage jobs"}
