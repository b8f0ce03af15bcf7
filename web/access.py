"""The one place where the API and the UI decide who may do what (docs/REFERENCE.md section 6).

Every endpoint that names a project calls `authorize` with the permission it needs
before it reads or changes anything; the async completion endpoint is the exception,
because its caller is a target, not a user, and proves itself with the invocation's
completion token instead. `may` asks the same question without raising, so the UI
shows only the buttons the caller may press (the POST behind each asks again).

A caller who may not read a project gets NOT_FOUND, as if it did not exist; one who
may read but not do this gets PERMISSION_DENIED.
"""

from __future__ import annotations

from flask import Flask, current_app, g, request

from engine.audit import LOCAL_ACTOR
from engine.errors import NotFound, Refused
from engine.ports import ProjectRow
from web.acl import OWN, READ, TRIGGER, Directory, permissions
from web.errors import ApiError
from web.identity import IAP_HEADER, Caller, Identifier, Unauthenticated
from web.sessions import SAFE_METHODS, csrf_matches, session_caller

__all__ = ["OWN", "READ", "TRIGGER", "actor", "authorize", "caller", "install", "may", "readable"]

# Paths whose callers are not users, or not yet: the queue and cron (web/guard.py), the
# health and readiness checks, the UI's stylesheet and sign-in form, the example
# projects' echo (it answers only the invocation id it was sent, and exists only on the
# embedded backend: the demo heartbeat carries no token); the async completion carries
# its own token.
_NOT_USERS = ("/internal/", "/healthz", "/readyz", "/static/", "/signin", "/signout", "/demo/echo")


def install(app: Flask, identifier: Identifier, directory: Directory) -> None:
    """Identify every user request before its handler runs: an unknown or forged
    credential gets 401 whatever the endpoint."""
    app.config["SUNDIAL_IDENTIFIER"] = identifier
    app.config["SUNDIAL_DIRECTORY"] = directory

    @app.before_request
    def _identify() -> None:
        if request.path.startswith(_NOT_USERS) or request.path.endswith(":complete"):
            return None
        caller()
        if g.get("sundial_by_cookie") and request.method not in SAFE_METHODS and not csrf_matches():
            raise ApiError("PERMISSION_DENIED", "a request signed in by the UI's session cookie "
                                                "needs the UI's CSRF token (X-CSRF-Token)")
        return None


def caller() -> Caller:
    """The caller of the current request, identified once."""
    if "sundial_caller" not in g:
        try:
            g.sundial_caller = _identify(current_app.config["SUNDIAL_IDENTIFIER"])
        except Unauthenticated as error:
            raise ApiError("UNAUTHENTICATED", str(error)) from None
    identified: Caller = g.sundial_caller
    return identified


def actor() -> str:
    """Who the audit log says did what the current request does: the caller's principal,
    or `local` in the one-machine mode without identities, where nobody is named."""
    who = caller()
    return LOCAL_ACTOR if who.open_access else who.principal


def _identify(identifier: Identifier) -> Caller:
    """The request's own credentials, else the UI's signed-in session (web/sessions.py:
    a browser cannot send a bearer token itself)."""
    headers = request.headers
    if headers.get("Authorization") or headers.get(IAP_HEADER) or identifier.open_access:
        return identifier.identify(headers)
    from_session = session_caller(identifier)
    if from_session is None:
        return identifier.identify(headers)
    g.sundial_by_cookie = True
    return from_session


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
