"""Who may do what to a project (CONTRACT section 6): the API's one access hook.

Every API endpoint that names a project calls `authorize` with the permission it
needs before it reads or changes anything; the async completion endpoint is the
exception, because its caller is a target, not a user, and proves itself with the
invocation's completion token instead.

Permissions, as the contract's roles grant them:
    READ     readers, triggerers, owners   jobs, invocations, logs
    TRIGGER  triggerers, owners            trigger, pause, resume
    OWN      owners                        abort, create/replace/delete API jobs
"""

from __future__ import annotations

from engine.operations import Refused
from engine.ports import ProjectRow
from engine.service import NotFound
from web.errors import ApiError

READ, TRIGGER, OWN = "read", "trigger", "own"


def authorize(project: ProjectRow, permission: str) -> None:
    """Return if the caller has `permission` on `project`; raise otherwise.

    With no SUNDIAL_API_TOKENS configured (and not on App Engine) every caller is an
    owner, which is all there is for now. The ACL check goes here: identify the
    caller (IAP, a Google ID token, or a bearer token of SUNDIAL_API_TOKENS: 401
    UNAUTHENTICATED without a valid one), then compare the project's
    `settings["acl"]` roles with `permission`: a caller who may not READ gets
    NOT_FOUND, as if the project did not exist; one who may read but not do this
    gets PERMISSION_DENIED.
    """
    del project, permission  # everyone is an owner


def may(project: ProjectRow, permission: str) -> bool:
    """Whether the caller has `permission` on `project`: `authorize` asked without
    raising, so that the web UI shows only the buttons the caller may press (the
    POST behind each button asks `authorize` again)."""
    try:
        authorize(project, permission)
    except (ApiError, Refused, NotFound):
        return False
    return True
