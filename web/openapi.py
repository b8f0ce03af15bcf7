"""The OpenAPI 3 description of the REST API (GET /api/v1/openapi.json).

Written by hand rather than derived from the routes: it is a contract, and
tests/web/test_openapi.py checks that every route of the API is in it and every
path in it is a route; schemathesis then checks the live server against it.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from config import limits
from config.model import PROJECT_ID
from web.openapi_schemas import JOB_ID_PATTERN, ref, schemas

ERRORS = {
    400: "INVALID_ARGUMENT: a malformed or invalid request (bad JSON, unknown field, bad schedule, ...)",
    401: "UNAUTHENTICATED: API tokens are configured and the request has no valid one",
    403: "PERMISSION_DENIED: the caller may read the project but not do this; a wrong completion token",
    404: "NOT_FOUND: no such project (or the caller may not read it), job or invocation",
    409: "ALREADY_EXISTS (the job is defined in a config file) or FAILED_PRECONDITION "
         "(the job's state refuses the action, e.g. triggering a paused job)",
    413: f"PAYLOAD_TOO_LARGE: the body is larger than {limits.MAX_REQUEST_BYTES:,} bytes",
    429: "RESOURCE_EXHAUSTED: too many changes of this job are under way at once; try again after "
         "the `Retry-After` header's seconds",
}
SECURED = (401,)  # every endpoint but the completion callback may answer these, once access exists

_PROJECT = {"name": "project", "in": "path", "required": True, "example": "demo",
            "schema": {"type": "string", "pattern": f"^{PROJECT_ID.pattern}$"}}
_JOB = {"name": "job", "in": "path", "required": True, "example": "reminder-42",
        "schema": {"type": "string", "pattern": JOB_ID_PATTERN}}
_INVOCATION = {"name": "invocation", "in": "path", "required": True, "schema": {"type": "string", "minLength": 1}}


def _json(schema_name: str) -> dict[str, Any]:
    return {"application/json": {"schema": ref(schema_name)}}


def _operation(summary: str, ok: dict[str, Any], errors: tuple[int, ...], *,
               params: tuple[dict[str, Any], ...] = (), body: str | None = None,
               body_required: bool = False, description: str = "", secured: bool = True) -> dict[str, Any]:
    responses = dict(ok)
    if _JOB in params:  # an id outside the job id pattern is a 400 on every job path
        errors = (*errors, 400)
    for status in sorted(set(errors) | (set(SECURED) if secured else set())):
        responses[str(status)] = {"description": ERRORS[status], "content": _json("Error")}
    operation: dict[str, Any] = {"summary": summary, "responses": responses}
    if description:
        operation["description"] = description
    if params:
        operation["parameters"] = list(params)
    if body:
        operation["requestBody"] = {"required": body_required, "content": _json(body)}
    return operation


def _ok(status: int, schema: str | None, description: str) -> dict[str, Any]:
    response: dict[str, object] = {"description": description}
    if schema:
        response["content"] = _json(schema)
    return {str(status): response}


def _job_action(summary: str, description: str, body: str | None,
                errors: tuple[int, ...] = (400, 404, 409, 413, 429)) -> dict[str, Any]:
    return {"post": _operation(summary, _ok(200, "Job", "the job afterwards"), errors,
                               params=(_PROJECT, _JOB), body=body, description=description)}


_LABEL = {"name": "label", "in": "query", "schema": {"type": "array", "items": {
              "type": "string", "pattern": "^[a-z][a-z0-9_-]{0,62}([:=].*)?$"}},
          "style": "form", "explode": True,
          "description": "KEY:VALUE or KEY=VALUE (that value) or KEY (any value); repeated, all must match. Filtered "
                         "within each page, so a page may hold fewer jobs than page_size"}


def _paths() -> dict[str, Any]:
    job = "/projects/{project}/jobs/{job}"
    page: tuple[dict[str, Any], ...] = ({"name": "page_size", "in": "query", "schema": {
                "type": "integer", "minimum": 1, "maximum": limits.MAX_PAGE_SIZE, "default": 50}},
            {"name": "page_token", "in": "query", "schema": {"type": "string"},
             "description": "the previous page's next_page_token (opaque); one this list did not "
                            "issue is 400"})
    return {
        "/projects": {"get": _operation("List projects", _ok(200, "ProjectList", "the projects"), ())},
        "/projects/{project}/jobs": {"get": _operation(
            "List a project's jobs", _ok(200, "JobList", "one page of the jobs, in id order"), (400, 404),
            params=(_PROJECT, {**page[0], "schema": {**page[0]["schema"], "default": 100}}, page[1], _LABEL))},
        job: _job_methods(),
        "/projects/{project}/jobs:batchPut": _batch_put(),
        **_job_actions(job),
        **_bulk_paths(),
        **_invocation_paths(job, page),
        **_audit_paths(page),
        **_meta_paths(),
    }


def _job_methods() -> dict[str, Any]:
    return {
        "get": _operation("Get a job", _ok(200, "Job", "the job"), (404,), params=(_PROJECT, _JOB),
                          description="Also a job removed from its config file (state DISABLED)."),
        "put": _operation(
            "Create or replace an API-managed job",
            {**_ok(200, "Job", "replaced (or unchanged: the same body again changes nothing)"),
             **_ok(201, "Job", "created")},
            (400, 404, 409, 413, 429), params=(_PROJECT, _JOB), body="JobEntry", body_required=True,
            description=f"Replacing the timing re-plans the job. 409 for a job its project's config "
                        f"file defines; 404 for a project without a config file. A project holds at "
                        f"most {limits.MAX_JOBS_PER_PROJECT:,} jobs (409 beyond)."),
        "delete": _operation(
            "Delete an API-managed job", {"204": {"description": "deleted"}}, (400, 404, 409, 429),
            params=(_PROJECT, _JOB, {"name": "allow_missing", "in": "query", "schema": {"type": "boolean"},
                                     "description": "204 also when there is no such job"}),
            description="Nothing pending is delivered afterwards: its invocations not yet finished "
                        "are ABORTED with reason `deleted`. 409 for a job its config file defines."),
    }


def _batch_put() -> dict[str, Any]:
    return {"post": _operation(
        "Create or replace many API-managed jobs", _ok(200, "BatchPutResult", "one result per job, in the order "
                                                                              "listed"),
        (400, 403, 404, 413), params=(_PROJECT,), body="BatchPutRequest", body_required=True,
        description=f"Up to {limits.MAX_BATCH_JOBS:,} jobs, each created, replaced or refused on its own "
                    "exactly as its PUT alone would be (the same validation, limits and owners' role), and "
                    "each audited on its own. A job's result holds the status its PUT would have answered "
                    "(201, 200, 400, 409, 429, 503) and, for a refusal, the error object of that answer. "
                    "A job may name another job of the same batch in `triggers`. The request itself is "
                    "refused (400) for more entries than the limit, an id listed twice, or an entry that "
                    "is not `{id, job}`. Sending the same batch again is safe: unchanged jobs write "
                    "nothing.")}


def _job_actions(job: str) -> dict[str, Any]:
    return {
    job + ":pause": _job_action("Pause a job", "No occurrence is delivered while paused; occurrences "
                                "meanwhile are SKIPPED/paused, not caught up.", "PauseRequest"),
    job + ":resume": _job_action("Resume a job", "", None),
    job + ":abort": _job_action("Abort the job's active invocations", "They end ABORTED.", "AbortRequest"),
    job + ":trigger": {"post": _operation(
        "Start an invocation now", _ok(200, "Invocation", "the invocation (SKIPPED/overlap under "
                                                          "`overlap: skip`; STARTING/buffered when queued; "
                                                          "STARTING/accepted when the job starts it shortly)"),
        (400, 404, 409, 413), params=(_PROJECT, _JOB), body="TriggerRequest",
        description="The overlap policy applies. 409 for a paused or disabled job. With "
                    "`scheduled_time`, the re-run of that past occurrence (trigger `manual`). While "
                    "other requests are changing the job, the trigger is accepted (its id is final) "
                    "and started within a moment, never refused for that.")},
    job + ":backfill": {"post": _operation(
        "Backfill a past range", _ok(200, "BackfillResult", "the invocations, in the order they start"),
        (400, 404, 409, 413, 429), params=(_PROJECT, _JOB), body="BackfillRequest", body_required=True,
        description="One invocation per fire time of the job's schedule in [start, end), trigger "
                    "`backfill`, each with its own scheduled time and template values, started one "
                    "after another (as many at once as `allow` lets run) whatever the overlap policy. "
                    "At most 1,000 per call; 400 for more, for start not before end, for a start "
                    "before 1970, for an end in the future, and for a schedule without fire times; "
                    "409 for a paused or "
                    "disabled job.")},
    }


def _bulk_paths() -> dict[str, Any]:
    jobs = "/projects/{project}/jobs"
    selected = ("Every job of the project, or those whose labels match `label`; each job acted on is "
                "changed and audited as if {verb} on its own, by the same permission (triggerers). ")
    return {
        jobs + ":pause": {"post": _operation(
            "Pause jobs in bulk", _ok(200, "BulkResult", "the ids paused, and what became of each selected job"),
            (400, 404, 413), params=(_PROJECT,), body="BulkRequest",
            description=selected.format(verb="paused") + "A job already paused keeps its own reason "
                        "(`unchanged`), so a retry changes nothing twice; a disabled job is `failed`.")},
        jobs + ":resume": {"post": _operation(
            "Resume jobs in bulk", _ok(200, "BulkResult", "the ids resumed, and what became of each selected job"),
            (400, 404, 413), params=(_PROJECT,), body="BulkRequest",
            description=selected.format(verb="resumed") + "Only paused jobs are resumed; `reason` goes "
                        "to the audit log.")},
    }


def _invocation_paths(job: str, page: tuple[dict[str, Any], ...]) -> dict[str, Any]:
    invocation = job + "/invocations/{invocation}"
    return {
    job + "/invocations": {"get": _operation(
        "List invocations, newest first", _ok(200, "InvocationList", "one page"), (400, 404),
        params=(_PROJECT, _JOB, *page),
        description="Page tokens are stable: new invocations never shift later pages.")},
    invocation: {"get": _operation("Get an invocation with its log",
                                   _ok(200, "InvocationWithLog", "the invocation"), (404,),
                                   params=(_PROJECT, _JOB, _INVOCATION))},
    invocation + ":complete": {"post": _operation(
        "Complete an async invocation", _ok(200, "Invocation", "the invocation afterwards (also when "
                                                               "the same completion comes again)"),
        (400, 401, 403, 404, 409, 413), body="CompleteRequest", body_required=True, secured=False,
        params=(_PROJECT, _JOB, _INVOCATION,
                {"name": "X-Sundial-Completion-Token", "in": "header", "schema": {"type": "string"},
                 "description": "the token of the delivery's X-Sundial-Completion-Token header; "
                                "or send it as `Authorization: Bearer <token>`"}),
        description="For targets with `async: true` that answered 202. 401 without a token, 403 "
                    "with a wrong one (nothing changes); 409 if the invocation already ended "
                    "otherwise.")},
    }


def _audit_paths(page: tuple[dict[str, Any], ...]) -> dict[str, Any]:
    size = {**page[0], "schema": {**page[0]["schema"], "default": 100}}
    only_job = {"name": "job", "in": "query", "schema": {"type": "string", "pattern": JOB_ID_PATTERN},
                "description": "only this job's entries (also a job deleted since)"}
    return {"/projects/{project}/audit": {"get": _operation(
        "List the project's operator actions, newest first", _ok(200, "AuditList", "one page"), (400, 404),
        params=(_PROJECT, size, page[1], only_job),
        description="Every pause, resume, trigger, abort, backfill, PUT and DELETE that changed a job, "
                    "with who did it. Kept as long as invocation history (SUNDIAL_HISTORY_DAYS).")}}


def _meta_paths() -> dict[str, Any]:
    return {
    "/validate": {"post": {**_operation(
        "Validate a project config", _ok(200, "ValidationResult", "the errors, by line (none: valid)"),
        (400, 413), params=({"name": "project", "in": "query", "schema": {
            "type": "string", "pattern": f"^{PROJECT_ID.pattern}$"},
            "description": "also check this project id"},)),
        "requestBody": {"required": False, "content": {
            "application/yaml": {"schema": ref("ProjectConfig")},
            "application/json": {"schema": ref("ProjectConfig")}}}}},
    "/openapi.json": {"get": {"summary": "This document",
                              "responses": {"200": {"description": "OpenAPI 3",
                                                    "content": {"application/json": {"schema": {
                                                        "type": "object"}}}}}}},
    }

def _description() -> str:
    rows = "\n".join(f"| {name} | {value:,} |" for name, value in limits.LIMITS.items())
    return ("Sundial's REST API (docs/REFERENCE.md section 5). Errors are `{\"error\": {\"code\", \"message\"}}`.\n\n"
            "Limits (config/limits.py); beyond them requests fail with a message naming the limit:\n\n"
            "| limit | value |\n|---|---|\n" + rows)


@lru_cache(maxsize=1)
def openapi_document() -> dict[str, Any]:
    return {
        "openapi": "3.0.3",
        "info": {"title": "Sundial", "version": "1", "description": _description()},
        "servers": [{"url": "/api/v1"}],
        "paths": _paths(),
        "components": {"schemas": schemas()},
        "x-sundial-limits": dict(limits.LIMITS),
    }
