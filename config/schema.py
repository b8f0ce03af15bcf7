"""A JSON Schema (draft 2020-12) of the project file, for editors and other tools.

    python -m config.schema > docs/project.schema.json

Sundial has no declarative model of its fields: validation is code (config/validate.py
for the top level, config/jobs.py for a job entry, config/targets.py for targets). The
schema is built from the names, limits, patterns, choices and defaults those modules
define (TOP_FIELDS, JOB_FIELDS, config/limits.py, the id patterns, BUILTIN_DEFAULTS) and
from each target kind's spec (statemachine/target_kinds.py: its fields and the required
ones), and only the type and the one-line description of each field are written here.
The API's OpenAPI document takes its target schema from here (`target_schema`).
Building fails when a field list there names a field this module does not describe,
or the other way round, so a new field cannot be left out of the schema
(tests/config/test_schema.py also checks the published file is current).

The validator stays the authority. The schema is looser where a rule needs code
(schedule syntax, template variables, references between jobs, address checks) and
approximates byte limits by character counts (a text over the limit in characters is
over it in bytes too, so no valid file is refused for it). It accepts null where the
validator reads null as "not set" (the top-level fields and a job's optional fields).
"""

from __future__ import annotations

import json
import sys
from typing import Any

from config import job_extras, limits
from config.auth import AUTH_KINDS, DEFAULT_SCOPE, OAUTH_FIELDS, OIDC_FIELDS
from config.calendars import CALENDAR_FIELDS
from config.fanin import MAX_UPSTREAM
from config.jobs import _SHARED, JOB_FIELDS, PER_JOB_FIELDS
from config.model import BUILTIN_DEFAULTS, JOB_ID, PROJECT_ID, TRIGGER_CONDITIONS
from config.targets import (
    _HEADER_NAME,
    _QUEUE,
    _TOPIC,
    DEFAULT_ATTEMPT_TIMEOUT,
    HTTP_METHODS,
    SECRET_NAME,
    TARGET_KINDS,
)
from config.validate import _MEMBER, ACL_ROLES, TOP_FIELDS
from statemachine.durations import format_duration
from statemachine.policy import Catchup, Overlap
from statemachine.target_kinds import TARGET_KIND_SPECS
from statemachine.vocabulary import TargetKind

__all__ = ["Schema", "exclude_schema", "project_schema", "target_schema", "trigger_edge", "main"]

DRAFT = "https://json-schema.org/draft/2020-12/schema"
Schema = dict[str, Any]  # one JSON Schema object, JSON-ready
DURATION = r"^\s*(\d+(\.\d+)?(ms|s|m|h|d))+\s*$"


def _anchored(pattern: str) -> str:
    """A Python `fullmatch` pattern as an anchored ECMA-262 one (JSON Schema's dialect)."""
    return f"^(?:{pattern})$"


def _text(description: str, **more: Any) -> Schema:
    return {"type": "string", "description": description, **more}


def _duration(description: str, default: Any = None) -> Schema:
    schema = _text(description + " A duration: <number><unit>..., units ms s m h d (e.g. 90s, 1h30m).",
                   pattern=DURATION)
    if default is not None:
        schema["default"] = default
    return schema


def _integer(description: str, low: int, high: int | None = None, default: Any = None) -> Schema:
    schema: Schema = {"type": "integer", "description": description, "minimum": low}
    if high is not None:
        schema["maximum"] = high
    if default is not None:
        schema["default"] = default
    return schema


def _nullable(schema: Schema) -> Schema:
    """The validator reads null as "not set" for this field."""
    return {"anyOf": [schema, {"type": "null"}], "description": schema.get("description", "")}


def _closed(properties: dict[str, Schema], description: str, required: tuple[str, ...] = (), **more: Any) -> Schema:
    schema: Schema = {"type": "object", "description": description, "properties": properties,
                    "additionalProperties": False, **more}
    if required:
        schema["required"] = list(required)
    return schema


def _checked(where: str, described: dict[str, Schema], names: tuple[str, ...] | list[str]) -> dict[str, Schema]:
    """`described`, after checking it covers exactly the field names the validator knows."""
    missing, extra = set(names) - set(described), set(described) - set(names)
    if missing or extra:
        raise RuntimeError(f"config/schema.py is out of step with the validator's {where}: "
                           f"undescribed {sorted(missing)}, unknown {sorted(extra)}")
    return {name: described[name] for name in names}


# --- targets -------------------------------------------------------------------------

def _template(description: str, limit: int) -> Schema:
    return _text(description + " May use ${variables}; $${ is a literal ${.", maxLength=limit)


def _headers() -> Schema:
    secret = _closed({
        "secret": _text("Name of a secret of the job's project, read at delivery.",
                        pattern=_anchored(SECRET_NAME.pattern)),
        "prefix": _text("Text sent before the secret's value, e.g. 'Bearer '.", default=""),
    }, "A header value read from a secret at delivery time.", ("secret",))
    value = {"anyOf": [_template("A header value.", limits.MAX_HEADER_VALUE_BYTES), secret]}
    return {"type": "object", "description": "Request headers. X-Sundial-*, framing and hop-by-hop "
            "headers are refused.", "maxProperties": limits.MAX_HEADERS,
            "propertyNames": {"pattern": _anchored(_HEADER_NAME.pattern)},
            "additionalProperties": value, "default": {}}


def _method() -> Schema:
    methods = list(HTTP_METHODS) + [method.lower() for method in HTTP_METHODS]
    return {"type": "string", "enum": methods, "default": "POST", "description": "HTTP method."}


def _url(description: str) -> Schema:
    return _template(description, limits.MAX_URL_BYTES) | {"pattern": "^[Hh][Tt][Tt][Pp][Ss]?://"}


def _auth() -> Schema:
    account = _text("The service account's email, e.g. sa@PROJECT.iam.gserviceaccount.com; one the "
                    "server's operator granted to the project (SUNDIAL_IDENTITIES).")
    oidc = _closed(_checked("auth.oidc fields", {
        "service_account": account,
        "audience": _text("The token's audience, an https:// URL on the target URL's origin (or one the "
                          "operator granted the project); by default the target URL's origin."),
    }, OIDC_FIELDS), "A Google-signed OIDC ID token.", ("service_account",))
    oauth = _closed(_checked("auth.oauth fields", {
        "service_account": account,
        "scope": _text("OAuth scopes, separated by spaces.", default=DEFAULT_SCOPE),
    }, OAUTH_FIELDS), "A Google OAuth access token.", ("service_account",))
    return _closed(_checked("auth kinds", {"oidc": oidc, "oauth": oauth}, AUTH_KINDS),
                   "A token for a service account, minted at every attempt and sent as "
                   "Authorization: Bearer. Exactly one of oidc, oauth.", minProperties=1, maxProperties=1)


def _kind(kind: TargetKind, described: dict[str, Schema], description: str) -> Schema:
    """One kind's closed object: exactly its spec's fields (statemachine/target_kinds.py),
    its required ones required."""
    spec = TARGET_KIND_SPECS[kind]
    return _closed(_checked(f"{kind} target fields", described, spec.names), description, spec.required)


def _target_kinds() -> dict[str, Schema]:
    http = _kind(TargetKind.HTTP, {
        "url": _url("The URL called, http:// or https://."),
        "method": _method(),
        "headers": _headers(),
        "body": _template("The request body.", limits.MAX_BODY_BYTES) | {"default": ""},
        "timeout": _duration("Deadline of one attempt (at most 1h on the embedded backend, 9m on the "
                             "cloud backend).", format_duration(DEFAULT_ATTEMPT_TIMEOUT)),
        "async": {"type": "boolean", "default": False, "description": "A 202 answer leaves the "
                  "invocation RUNNING until the target reports completion or the job's timeout."},
        "auth": _auth(),
        "cancel_url": _url("With async: true only: POSTed to once, with the target's headers and auth, "
                           "when an invocation is aborted (a JSON body: invocation_id, job, "
                           "scheduled_time, reason)."),
    }, "An HTTP request.")
    pubsub = _kind(TargetKind.PUBSUB, {
        "topic": _text("The topic, projects/P/topics/T.", pattern=_anchored(_TOPIC.pattern)),
        "data": _template("The message data.", limits.MAX_BODY_BYTES) | {"default": ""},
        "attributes": {"type": "object", "maxProperties": limits.MAX_ATTRIBUTES, "default": {},
                       "description": "Message attributes; sundial_* and goog* are reserved.",
                       "additionalProperties": _template("An attribute value.",
                                                         limits.MAX_ATTRIBUTE_VALUE_BYTES)},
    }, "A Pub/Sub message.")
    tasks = _kind(TargetKind.CLOUD_TASKS, {
        "queue": _text("The queue, projects/P/locations/L/queues/Q.", pattern=_anchored(_QUEUE.pattern)),
        "url": _url("The URL the task calls."),
        "method": _method(),
        "headers": _headers(),
        "body": _template("The task's body.", limits.MAX_BODY_BYTES) | {"default": ""},
        "auth": _auth(),
    }, "A Cloud Tasks HTTP task.")
    _checked("noop target fields", {}, TARGET_KIND_SPECS[TargetKind.NOOP].names)
    noop = {"anyOf": [{"type": "object", "maxProperties": 0}, {"type": "null"}],
            "description": "Delivers nothing and succeeds: write noop: {}."}
    return _checked("target kinds", {"http": http, "pubsub": pubsub, "cloud_tasks": tasks, "noop": noop},
                    [kind.value for kind in TARGET_KINDS])


def target_schema() -> Schema:
    """A target: exactly one kind, each with exactly its spec's fields."""
    return {"type": "object", "description": "Exactly one of " + ", ".join(kind.value for kind in TARGET_KINDS) + ".",
            "properties": _target_kinds(), "additionalProperties": False,
            "minProperties": 1, "maxProperties": 1}


def _target(description: str) -> Schema:
    return {"$ref": "#/$defs/target", "description": description}


# --- job fields ----------------------------------------------------------------------

def _shared_fields() -> dict[str, Schema]:
    """The fields a job sets or takes from the project's `defaults`."""
    builtin = BUILTIN_DEFAULTS
    catchup, retry, fanout = builtin["catchup"], builtin["retry"], builtin["fanout"]
    names = {"type": "array", "items": {"type": "string", "pattern": _anchored(JOB_ID.pattern)}}
    return _checked("defaultable job fields", {
        "timezone": _text("IANA time zone the schedule and the template dates are read in.",
                          default=builtin["timezone"]),
        "disabled": {"type": "boolean", "default": False, "description": "No new occurrences."},
        "overlap": {"type": "string", "enum": [item.value for item in Overlap],
                    "default": builtin["overlap"].value,
                    "description": "What an occurrence does while an invocation is still active."},
        "max_concurrent": _integer("Active invocations at most (only with overlap: allow).", 1,
                                   default=builtin["max_concurrent"]),
        "catchup": _closed({
            "policy": {"type": "string", "enum": [item.value for item in Catchup],
                       "default": catchup["policy"].value, "description": "Which missed occurrences run."},
            "window": _duration("How late a missed occurrence may still run.",
                                format_duration(catchup["window"])),
        }, "Occurrences missed while Sundial was not running."),
        "timeout": _duration("Deadline of one invocation (at most 7d).", format_duration(builtin["timeout"])),
        "retry": _closed({
            "max_attempts": _integer("Attempts in all, the first included.", 1, limits.MAX_ATTEMPTS,
                                     retry["max_attempts"]),
            "min_backoff": _duration("Wait after the first failed attempt (at least 100ms).",
                                     format_duration(retry["min_backoff"])),
            "max_backoff": _duration("Longest wait between attempts.", format_duration(retry["max_backoff"])),
        }, "Attempts of one delivery, with exponential backoff."),
        "fanout": _closed({
            "count": _integer("Events per occurrence.", 1, 10_000, fanout["count"]),
            "spread": _duration("Event i is due at the scheduled time + i * spread / count.",
                                format_duration(fanout["spread"])),
        }, "Several events per occurrence, staggered."),
        "throttle": _text("Name of a throttle of the project.", pattern=_anchored(JOB_ID.pattern)),
        "triggers": {"type": "array", "items": {"anyOf": [names["items"], trigger_edge()]}, "default": [],
                     "description": "Jobs of the project started when an invocation of this one ends: an id "
                                    "alone when it succeeds, {job, on} for another condition."},
        "pause_after_failures": _integer("Pause the job after this many FAILED invocations in a row.", 1),
        "jitter": _duration(f"Each occurrence is delivered up to this long after its time (at most "
                            f"{format_duration(job_extras.MAX_JITTER)}), by a fixed amount per scheduled time."),
        "labels": {"type": "object", "maxProperties": job_extras.MAX_LABELS,
                   "propertyNames": {"pattern": _anchored(job_extras.LABEL_KEY.pattern)},
                   "additionalProperties": {"type": "string", "maxLength": job_extras.MAX_LABEL_VALUE},
                   "description": "Key: value tags shown with the job; the jobs list filters by them."},
    }, list(_SHARED))


_INSTANT = {"type": "string", "pattern": r"^\d{4}-\d\d-\d\d[Tt ]\d\d:\d\d(:\d\d(\.\d+)?)?"
                                        r"\s*([Zz]|[+-]\d\d(:?\d\d)?)$"}


def trigger_edge() -> Schema:
    """A `triggers` entry with its condition (the OpenAPI document's JobEntry reuses it)."""
    return _closed({"job": _text("A job of the project.", pattern=_anchored(JOB_ID.pattern)),
                    "on": {"type": "string", "enum": list(TRIGGER_CONDITIONS), "default": "succeeded",
                           "description": "When the invocation's end starts the job: succeeded, failed, "
                                          "or finished (either)."}},
                   "A job started on a condition.", ("job",))


_DATE = {"type": "string", "pattern": r"^\d{4}-\d\d-\d\d$"}
_LOCAL_TIME = {"type": "string", "pattern": r"^\d{4}-\d\d-\d\d([Tt ]\d\d:\d\d(:\d\d(\.\d+)?)?)?$"}


def _calendar(named: bool) -> Schema:
    """An exclusion calendar: in the `calendars` block, or inline in a job's `exclude` (`named`)."""
    span = _closed({"start": _LOCAL_TIME | {"description": "First excluded wall time (no offset)."},
                    "end": _LOCAL_TIME | {"description": "First wall time no longer excluded."}},
                   "Local wall times [start, end) in the calendar's zone.", ("start", "end"))
    fields = _checked("calendar fields", {
        "timezone": _text("IANA time zone its dates and ranges are read in.", default="UTC"),
        "dates": {"type": "array", "items": _DATE, "maxItems": limits.MAX_CALENDAR_ENTRIES,
                  "description": "Whole local days excluded (YYYY-MM-DD)."},
        "ranges": {"type": "array", "items": span, "maxItems": limits.MAX_CALENDAR_ENTRIES,
                   "description": "Local time ranges excluded."},
    }, CALENDAR_FIELDS)
    if not named:
        return _closed(fields, "Dates and time ranges in which a job's scheduled occurrences are SKIPPED/excluded.")
    name = _text("The calendar's name, shown as the reason's source.", pattern=_anchored(JOB_ID.pattern))
    return _closed({"name": name, **fields}, "A calendar of this job's own.", ("name",))


def exclude_schema() -> Schema:
    """A job's `exclude` (the OpenAPI document's JobEntry reuses it)."""
    named = _text("Name of a calendar of the project's `calendars`.", pattern=_anchored(JOB_ID.pattern))
    return {"type": "array", "maxItems": limits.MAX_EXCLUDE_CALENDARS, "items": {"anyOf": [named, _calendar(True)]},
            "description": "Exclusion calendars: an occurrence of the schedule whose time falls in one is "
                           "SKIPPED/excluded."}


def _job_fields() -> dict[str, Schema]:
    shared = _shared_fields()
    per_job = _checked("per-job fields", {
        "id": _text("The job's id, unique in the project.", pattern=_anchored(JOB_ID.pattern)),
        "schedule": _text("When the job runs: cron (5, 6 or 7 fields), a macro such as @daily, "
                          "'every 10m [offset 1m]', 'with 10m interval', 'continuously' or "
                          "'triggered'.", minLength=1),
        "at": {"type": "array", "minItems": 1, "maxItems": limits.MAX_AT_TIMES,
               "description": "One-off times instead of a schedule (RFC 3339, with an offset or Z).",
               "items": _INSTANT},
        "description": _text("Free text shown with the job.", maxLength=job_extras.MAX_DESCRIPTION),
        "start": _INSTANT | {"description": "No occurrence before this instant (RFC 3339, with an offset or Z)."},
        "end": _INSTANT | {"description": "No occurrence after this instant; then the job is DONE."},
        "target": _target("Where each occurrence is delivered: exactly one kind."),
        "on_failure": _target("Where a FAILED invocation's notification goes."),
        "on_recovery": _target("Where the notification of the first SUCCEEDED invocation after FAILED ones goes."),
        "exclude": exclude_schema(),
        "after": {"type": "array", "minItems": 1, "maxItems": MAX_UPSTREAM, "items": {
                      "type": "string", "pattern": _anchored(JOB_ID.pattern)},
                  "description": "Fan-in: jobs of the project that must each SUCCEED for one scheduled time; "
                                 "then this job runs once for it (trigger `after`). A job with after has no "
                                 "schedule of its own."},
        "after_window": _duration("How long after the first upstream job's report for a scheduled time the "
                                  "others have to succeed; then it is SKIPPED/upstream.", "1h"),
    }, PER_JOB_FIELDS)
    fields = {**shared, **per_job}
    return _checked("job fields", {name: field if name in ("id", "target") else _nullable(field)
                                   for name, field in fields.items()}, JOB_FIELDS)


def _top_fields() -> dict[str, Schema]:
    member = {"type": "string", "pattern": _anchored(_MEMBER.pattern)}
    acl = _closed({role: {"type": "array", "items": member} for role in ACL_ROLES},
                  "Who may do what: user:EMAIL, group:NAME, serviceAccount:EMAIL or anonymous.")
    throttle = _closed({"max_in_flight": _integer("Deliveries at once across the jobs naming it.", 1)},
                       "A named limit.", ("max_in_flight",))
    shared = _shared_fields()
    return _checked("top-level fields", {
        "allowed_hosts": {"type": "array", "items": {"type": "string", "pattern": r"^[^\s/@?#]+$"},
                          "description": "Hosts allowed as targets despite the address rules."},
        "acl": acl,
        "defaults": _closed({name: _nullable(schema) for name, schema in shared.items()},
                            "Values for the jobs' fields where a job does not set them."),
        "throttles": {"type": "object", "description": "Named limits shared by jobs.",
                      "propertyNames": {"pattern": _anchored(JOB_ID.pattern)},
                      "additionalProperties": throttle},
        "calendars": {"type": "object", "description": "Named exclusion calendars the jobs' `exclude` names.",
                      "propertyNames": {"pattern": _anchored(JOB_ID.pattern)},
                      "additionalProperties": _calendar(False)},
        "jobs": {"type": "array", "items": {"$ref": "#/$defs/job"}, "description": "The jobs."},
    }, TOP_FIELDS)


def project_schema() -> Schema:
    """The schema of `<configs>/<project>.yaml` (a project id is the file's stem,
    matching PROJECT_ID; JSON Schema cannot see file names)."""
    job = _closed(_job_fields(), "One job.", ("id", "target"),
                  oneOf=[{"required": ["schedule"], "not": {"anyOf": [{"required": ["at"]}, {"required": ["after"]}]}},
                         {"required": ["at"], "not": {"anyOf": [{"required": ["schedule"]}, {"required": ["after"]}]}},
                         # a fan-in job: no time of its own (schedule, if given, is `triggered`)
                         {"required": ["after"], "not": {"required": ["at"]},
                          "properties": {"schedule": {"const": "triggered"}}}])
    top = _top_fields()
    return {
        "$schema": DRAFT,
        "title": "Sundial project file",
        "description": "One <configs>/<project>.yaml; the project id is the file's stem "
                       f"({_anchored(PROJECT_ID.pattern)}). Generated by python -m config.schema; "
                       "docs/REFERENCE.md explains every field.",
        "type": ["object", "null"],
        "properties": {name: _nullable(schema) for name, schema in top.items()},
        "additionalProperties": False,
        "$defs": {"job": job, "target": target_schema()},
    }


def render() -> str:
    """The published text: docs/project.schema.json holds exactly this."""
    return json.dumps(project_schema(), indent=2, ensure_ascii=False) + "\n"


def main() -> None:
    sys.stdout.write(render())


if __name__ == "__main__":
    main()
