"""The schemas of the OpenAPI document (components.schemas), kept beside web/views.py's
shapes: a field added to a view belongs here too (tests/web/test_openapi.py checks
real answers against these, and schemathesis checks the live server)."""

from __future__ import annotations

from typing import Any

from config import limits
from config.job_extras import MAX_DESCRIPTION, MAX_LABEL_VALUE, MAX_LABELS
from config.model import JOB_ID
from config.schema import Schema, exclude_schema, target_schema, trigger_edge
from engine.ports import JobSource
from statemachine.backfill import MAX_BACKFILL
from statemachine.policy import Catchup, Overlap
from statemachine.record import JobState
from statemachine.vocabulary import AuditAction, InvocationStatus

STATUSES = [status.value for status in InvocationStatus]
JOB_STATES = [state.value for state in JobState]
ERROR_CODES = ["INVALID_ARGUMENT", "UNAUTHENTICATED", "PERMISSION_DENIED", "NOT_FOUND",
               "ALREADY_EXISTS", "FAILED_PRECONDITION", "METHOD_NOT_ALLOWED", "PAYLOAD_TOO_LARGE", "INTERNAL",
               "UNAVAILABLE", "RESOURCE_EXHAUSTED"]
JOB_ID_PATTERN = f"^{JOB_ID.pattern}$"
DURATION = {"type": "string", "description": "`<number><unit>`, units ms s m h d, e.g. `90s`, `1h30m`",
            "example": "10m"}


def ref(name: str) -> Schema:
    return {"$ref": f"#/components/schemas/{name}"}


def nullable(schema: Schema) -> Schema:
    return {**schema, "nullable": True}


def _obj(properties: dict[str, Schema], required: list[str] | None = None, closed: bool = False,
         **extra: Any) -> Schema:
    schema: Schema = {"type": "object", "properties": properties, **extra}
    if required:
        schema["required"] = required
    if closed:
        schema["additionalProperties"] = False
    return schema


def _openapi_3_0(schema: Schema) -> Schema:
    """A JSON Schema (draft 2020-12) in OpenAPI 3.0's dialect: `anyOf` with null
    becomes `nullable`, and `propertyNames`, which 3.0 lacks, is left to validation."""
    branches = schema.get("anyOf")
    if isinstance(branches, list) and {"type": "null"} in branches and len(branches) == 2:
        other = next(branch for branch in branches if branch != {"type": "null"})
        rest = {key: value for key, value in schema.items() if key != "anyOf"}
        return nullable({**_openapi_3_0(other), **rest})
    return {key: _openapi_3_0_part(value) for key, value in schema.items() if key != "propertyNames"}


def _openapi_3_0_part(part: object) -> object:
    """A value inside a schema: a schema or a list of them converted, anything else as it is."""
    if isinstance(part, list):
        return [_openapi_3_0_part(item) for item in part]
    return _openapi_3_0(part) if isinstance(part, dict) else part


def _targets() -> Schema:
    """The project file's target schema (config/schema.py, itself built on each kind's
    spec in statemachine/target_kinds.py): the API takes the targets a file does."""
    return _openapi_3_0(target_schema())


def _job_entry() -> Schema:
    return _obj({
        "id": {"type": "string", "pattern": JOB_ID_PATTERN, "description": "optional; must equal the path's job id"},
        "schedule": {"type": "string", "description": "cron (5, 6 or 7 fields), `@daily`, `every 10m`, "
                                                      "`with 10m interval`, `continuously` or `triggered`"},
        "at": {"type": "array", "minItems": 1, "maxItems": limits.MAX_AT_TIMES,
               "items": {"type": "string", "format": "date-time"},
               "description": "one-off times instead of a schedule; each with an offset or Z"},
        "timezone": {"type": "string", "example": "Europe/Berlin"},
        "disabled": {"type": "boolean"},
        "overlap": {"type": "string", "enum": [overlap.value for overlap in Overlap]},
        "max_concurrent": {"type": "integer", "minimum": 1},
        "catchup": _obj({"policy": {"type": "string", "enum": [catchup.value for catchup in Catchup]},
                         "window": DURATION}, closed=True),
        "timeout": DURATION,
        "retry": _obj({"max_attempts": {"type": "integer", "minimum": 1, "maximum": limits.MAX_ATTEMPTS},
                       "min_backoff": DURATION, "max_backoff": DURATION}, closed=True),
        "fanout": _obj({"count": {"type": "integer", "minimum": 1, "maximum": 10_000},
                        "spread": DURATION}, closed=True),
        "throttle": {"type": "string", "minLength": 1},
        "triggers": {"type": "array", "items": {"anyOf": [{"type": "string", "pattern": JOB_ID_PATTERN},
                                                          _openapi_3_0(trigger_edge())]},
                     "description": "jobs started when an invocation ends: an id alone on success, "
                                    "`{job, on: succeeded|failed|finished}` otherwise"},
        "pause_after_failures": {"type": "integer", "minimum": 1,
                                 "description": "pause the job after this many consecutive FAILED invocations"},
        "target": ref("Target"),
        "on_failure": {"allOf": [ref("Target")], "description": "notified with the invocation's summary "
                                                       "(JSON) when an invocation ends FAILED"},
        "on_recovery": {"allOf": [ref("Target")], "description": "notified with the invocation's summary "
                                                        "(JSON) when the first SUCCEEDED invocation follows "
                                                        "FAILED ones"},
        **_extras(),
    }, ["target"], closed=True, oneOf=[{"required": ["schedule"]}, {"required": ["at"]}],
        description="A config file's job entry without its id (docs/REFERENCE.md section 2): "
                    "give exactly one of `schedule` and `at`.",
        example={"at": ["2030-01-04T09:00:00Z"], "timezone": "UTC",
                 "target": {"http": {"url": "https://example.com/remind", "body": '{"at":"${scheduledTime}"}'}}})


def _extras() -> dict[str, Schema]:
    """The optional fields of docs/REFERENCE.md section 2.2 that describe and bound a job."""
    return {
        "description": {"type": "string", "maxLength": MAX_DESCRIPTION},
        "labels": {"type": "object", "maxProperties": MAX_LABELS,
                   "additionalProperties": {"type": "string", "maxLength": MAX_LABEL_VALUE},
                   "description": "keys ^[a-z][a-z0-9_-]{0,62}$; `GET .../jobs?label=KEY:VALUE` filters by them"},
        "jitter": {**DURATION, "description": "each occurrence is delivered up to this long after its "
                                              "time (at most 1h); headers and templates keep the nominal time"},
        "start": {"type": "string", "format": "date-time", "description": "no occurrence before this instant"},
        "end": {"type": "string", "format": "date-time",
                "description": "no occurrence after this instant; then the job is DONE"},
        "exclude": _exclude(),
    }


def _exclude() -> Schema:
    """A job's exclusion calendars: the project file's schema for them (config/schema.py)."""
    calendar = _openapi_3_0(exclude_schema()["items"]["anyOf"][1])  # the inline calendar
    return {"type": "array", "items": {"anyOf": [{"type": "string", "pattern": JOB_ID_PATTERN}, calendar]},
            "description": "exclusion calendars: names of the project file's `calendars`, or calendars of the "
                           "job's own; an occurrence of the schedule inside one is SKIPPED/`excluded`. A Job "
                           "shows each in full"}


def _invocation(with_log: bool) -> Schema:
    time = {"type": "string", "format": "date-time"}
    properties: dict[str, Schema] = {
        "id": {"type": "string"}, "job": {"type": "string"}, "project": {"type": "string"},
        "status": {"type": "string", "enum": STATUSES},
        "reason": {"type": "string", "description": "why it ended: `overlap`, `missed`, `paused`, `excluded`, "
                                                    "`replaced`, `upstream`, "
                                                    "`http 500`, `timeout`, ...; `buffered` while waiting"},
        "scheduled_time": time, "created_time": nullable(time),
        "started_time": nullable(time), "finished_time": nullable(time),
        "attempt": {"type": "integer", "minimum": 0}, "event_count": {"type": "integer", "minimum": 1},
        "trigger": {"type": "string", "description": "`schedule`, `manual`, `job:ID`, `catchup`, `backfill` or "
                                                     "`after` (a fan-in job's run)"},
    }
    required = ["id", "job", "status", "reason", "scheduled_time", "started_time", "finished_time",
                "attempt", "trigger"]
    if with_log:
        sent = _obj({"kind": {"type": "string", "description": "`http`, `pubsub` or `cloud_tasks`"}}, ["kind"],
                    description="on an attempt's result: the request it sent (method, url, headers, body; "
                                "topic, attributes, data; queue ...), every header value but a harmless "
                                "few and the URL's credentials `<redacted>`, the body's first 4 KiB "
                                "(`body_bytes`: its whole size when cut)")
        properties["log"] = {"type": "array", "items": _obj({"time": time, "message": {"type": "string"},
                                                              "request": sent}, ["time", "message"])}
        required.append("log")
    return _obj(properties, required)


def _job() -> Schema:
    return _obj({
        "id": {"type": "string"}, "project": {"type": "string"},
        "source": {"type": "string", "enum": [source.value for source in JobSource]},
        "schedule": {"type": "string"},
        "at": {"type": "array", "items": {"type": "string", "format": "date-time"}},
        "timezone": {"type": "string"},
        "state": {"type": "string", "enum": JOB_STATES,
                  "description": "as of the read; an occurrence committed ahead of its time (staged) is not "
                                 "running yet: SCHEDULED until its time"},
        "paused": {"type": "boolean"}, "pause_reason": {"type": "string"},
        "paused_by": {"type": "string", "description": "who paused it (`user:EMAIL`, `serviceAccount:EMAIL`, "
                                                      "`local`); only while paused; empty when paused by its failures"},
        "next_run_time": nullable({"type": "string", "format": "date-time",
                                   "description": "the next occurrence's scheduled time (without jitter), "
                                                  "a staged one's until it comes; null while paused or "
                                                  "disabled, or when nothing is left to run"}),
        "last_invocation": nullable(ref("Invocation")),
        "last_success_time": nullable({"type": "string", "format": "date-time",
                                       "description": "when the job's last SUCCEEDED invocation finished; "
                                                      "null until one has"}),
        "target": nullable({"type": "object"}),
        "active_invocations": {"type": "array", "items": {"type": "string"}},
        "config_error": {"type": "string", "description": "the error of the job's entry in its config file "
                                                          "while that entry is broken (the job runs its last good "
                                                          "definition); empty otherwise"},
        "after": {"type": "array", "items": {"type": "string"},
                  "description": "fan-in (a project file's job only): the jobs that must each succeed for a "
                                 "scheduled time before this one runs for it"},
        "after_window": {"type": "string", "description": "how long the others have after the first upstream "
                                                          "report; then the time is SKIPPED/`upstream`"},
        **_extras(),
    }, ["id", "project", "source", "timezone", "state", "paused", "next_run_time", "last_invocation",
        "target"])


def _project_config() -> Schema:
    entry = {**_job_entry(), "required": ["id", "target"]}
    entry.pop("example")
    return _obj({
        "allowed_hosts": {"type": "array", "items": {"type": "string"}},
        "acl": _obj({role: {"type": "array", "items": {"type": "string"}}
                     for role in ("readers", "triggerers", "owners")}, closed=True),
        "defaults": {"type": "object"},
        "throttles": {"type": "object", "additionalProperties": _obj(
            {"max_in_flight": {"type": "integer", "minimum": 1}}, ["max_in_flight"], closed=True)},
        "jobs": {"type": "array", "items": entry},
    }, description="A project config file. POST /validate reports unknown fields (and every "
                   "other problem) as errors in its answer rather than refusing the request.")


def schemas() -> dict[str, Schema]:
    return {
        "Error": _obj({"error": _obj({
            "code": {"type": "string", "enum": ERROR_CODES},
            "message": {"type": "string"},
            "details": {"type": "array", "items": {"type": "string"}},
        }, ["code", "message"])}, ["error"]),
        "Target": _targets(),
        "JobEntry": _job_entry(),
        **_batch_schemas(),
        "Job": _job(),
        "JobList": _obj({"jobs": {"type": "array", "items": ref("Job")},
                         "next_page_token": nullable({"type": "string"})}, ["jobs", "next_page_token"]),
        "Invocation": _invocation(with_log=False),
        "InvocationWithLog": _invocation(with_log=True),
        "InvocationList": _obj({"invocations": {"type": "array", "items": ref("Invocation")},
                                "next_page_token": nullable({"type": "string"})},
                               ["invocations", "next_page_token"]),
        "Project": _obj({"id": {"type": "string"}, "job_count": {"type": "integer", "minimum": 0},
                         "config_error": nullable({"type": "string"}),
                         "job_errors": {"type": "array", "items": {"type": "string"}}},
                        ["id", "job_count", "config_error"]),
        "ProjectList": _obj({"projects": {"type": "array", "items": ref("Project")}}, ["projects"]),
        "PauseRequest": _obj({"reason": nullable({"type": "string", "maxLength": limits.MAX_REASON_CHARS})},
                             closed=True),
        "AbortRequest": _obj({"reason": nullable({"type": "string", "maxLength": limits.MAX_REASON_CHARS})},
                             closed=True),
        "TriggerRequest": _obj({"request_id": nullable({
            "type": "string", "maxLength": limits.MAX_REQUEST_ID_CHARS,
            "description": "idempotency key: the same id again returns the first request's invocation"}),
            "scheduled_time": nullable({"type": "string", "format": "date-time", "description": (
                "re-run this past occurrence: the invocation's scheduled time and template values "
                "(RFC 3339 with an offset or Z; a future time, or one older than the history kept "
                "(SUNDIAL_HISTORY_DAYS), is 400)")})},
            closed=True),
        **_backfill_schemas(),
        **_bulk_schemas(),
        "CompleteRequest": _obj({"status": {"type": "string", "enum": [InvocationStatus.SUCCEEDED.value,
                                                                      InvocationStatus.FAILED.value]},
                                 "message": nullable({"type": "string", "maxLength": limits.MAX_MESSAGE_CHARS})},
                                ["status"], closed=True),
        **_audit_schemas(),
        "ProjectConfig": _project_config(),
        "ValidationResult": _obj({"errors": {"type": "array", "items": _obj(
            {"line": {"type": "integer", "minimum": 0}, "message": {"type": "string"}},
            ["line", "message"])}}, ["errors"]),
    }


def _batch_schemas() -> dict[str, Schema]:
    """The batch put's request and answer (`POST .../jobs:batchPut`)."""
    return {
        "BatchPutRequest": _obj({"jobs": {"type": "array", "maxItems": limits.MAX_BATCH_JOBS, "items": _obj(
            {"id": {"type": "string", "pattern": JOB_ID_PATTERN}, "job": ref("JobEntry")},
            ["id", "job"], closed=True)}}, ["jobs"], closed=True),
        "BatchPutResult": _obj({"results": {"type": "array", "items": _obj({
            "id": {"type": "string"},
            "status": {"type": "integer", "description": "what a PUT of this job alone would have answered: "
                                                          "201 created, 200 replaced or unchanged, else refused"},
            "error": {"type": "object", "description": "a refusal's `{code, message, details?}`, as in Error"},
        }, ["id", "status"])}}, ["results"]),
    }


def _backfill_schemas() -> dict[str, Schema]:
    time = {"type": "string", "format": "date-time"}
    return {
        "BackfillRequest": _obj({
            "start": {**time, "description": "the first instant of the range, included (RFC 3339, offset or Z)"},
            "end": {**time, "description": "the end of the range, excluded; not in the future"},
            "request_id": nullable({"type": "string", "maxLength": limits.MAX_REQUEST_ID_CHARS,
                                    "description": "idempotency key: the same id again names the same "
                                                   "invocations and starts nothing new"})},
            ["start", "end"], closed=True),
        "BackfillResult": _obj({
            "count": {"type": "integer", "minimum": 0, "maximum": MAX_BACKFILL},
            "invocations": {"type": "array", "items": {"type": "string"},
                            "description": "the ids, in the order they start; those still waiting their "
                                           "turn are not readable yet"}},
            ["count", "invocations"]),
    }


def _bulk_schemas() -> dict[str, Schema]:
    """`POST .../jobs:pause` and `:resume` (web/api_bulk.py)."""
    selector = {"type": "string", "pattern": "^[a-z][a-z0-9_-]{0,62}([:=].*)?$"}
    return {
        "BulkRequest": _obj({
            "label": nullable({"oneOf": [selector, {"type": "array", "items": selector}], "description": (
                "KEY=VALUE, KEY:VALUE or KEY (any value), or a list of them that a job must all match; "
                "none selects every job of the project")}),
            "reason": nullable({"type": "string", "maxLength": limits.MAX_REASON_CHARS,
                                "description": "shown beside each job paused; recorded in the audit log"})},
            closed=True),
        "BulkResult": _obj({
            "ids": {"type": "array", "items": {"type": "string"}, "description": "the jobs acted on, in id order"},
            "results": {"type": "array", "items": _obj({
                "id": {"type": "string"},
                "outcome": {"type": "string", "enum": ["paused", "resumed", "unchanged", "failed"]},
                "error": _obj({"code": {"type": "string"}, "message": {"type": "string"}}, ["code", "message"])},
                ["id", "outcome"])}},
            ["ids", "results"]),
    }


def _audit_schemas() -> dict[str, Schema]:
    """The audit log's page (`GET .../audit`)."""
    return {
        "AuditEntry": _obj({
            "time": {"type": "string", "format": "date-time"}, "actor": {"type": "string"},
            "action": {"type": "string", "enum": [action.value for action in AuditAction]},
            "job": {"type": "string"},
            "detail": {"type": "object", "description": (
                "`reason` (pause, abort, resume); `created`, `before` and `after` (put: each "
                "`{revision, targets}`, the definition's digest and where each of its targets "
                "sends, a URL without its query); `invocation` (trigger; `scheduled_time` "
                "for a re-run), `start`, `end`, `count` (backfill)")},
        }, ["time", "actor", "action", "job", "detail"]),
        "AuditList": _obj({"entries": {"type": "array", "items": ref("AuditEntry")},
                           "next_page_token": nullable({"type": "string"})}, ["entries", "next_page_token"]),
    }
