"""Delivery targets of a job entry: exactly one of http, pubsub, cloud_tasks, noop.

Defaults (docs/REFERENCE.md section 2.3): http `method: POST`, `headers: {}`, `body: ""`,
`timeout: 60s`, `async: false`, no `auth` (config/auth.py); pubsub `data: ""`, `attributes: {}`; cloud_tasks
`method: POST`, `headers: {}`, `body: ""`. Templates (docs/REFERENCE.md section 4) are checked in
every url, header value, body, data and attribute value.

The literal-address rule of docs/REFERENCE.md section 6 is applied to http urls here, at
validation time: a host that is the metadata server or a literal link-local address
(on the cloud backend also loopback, private, multicast or other non-public addresses,
IPv6 outside global unicast, IPv4 inside NAT64/6to4/compatible forms, and `localhost`;
statemachine/safety.py decides, for delivery too) is an error unless the project's
`allowed_hosts` lists it. Names that only resolve to such addresses are caught at
delivery, which re-checks every address.
cloud_tasks urls are exempt: Cloud Tasks calls them from Google's network, not Sundial's.

Headers named `X-Sundial-*`, framing and hop-by-hop headers (`Content-Length`, `Host`,
`Proxy-*`, ...: statemachine/safety.py) and attributes named `sundial_*` or `goog*` are refused:
Sundial and Pub/Sub set those themselves. Sizes are bounded by config/limits.py (url,
body and data templates, each header value, all headers together, Pub/Sub attributes).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Callable, Iterable

from config import limits
from config.addresses import BACKENDS, canonical_host, refusal, scheme_and_host
from config.auth import parse_auth
from config.checks import Checker
from config.settings import own_service
from config.yamlsource import Path
from statemachine.definition import TargetSpec
from statemachine.durations import format_duration
from statemachine.safety import OwnService, is_framing_header, masked_url
from statemachine.target_kinds import TARGET_KIND_SPECS, FieldShape
from statemachine.template import TemplateError, hook_only_variables, validate_template
from statemachine.vocabulary import TargetKind

__all__ = [
    "BACKENDS", "DEFAULT_ATTEMPT_TIMEOUT", "HTTP_METHODS", "TARGET_KINDS", "VALIDATORS", "TargetRules",
    "canonical_host", "parse_target", "refusal",
]

TARGET_KINDS = tuple(TargetKind)
HTTP_METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE", "HEAD")
DEFAULT_ATTEMPT_TIMEOUT = timedelta(seconds=60)

_TOPIC = re.compile(r"projects/[^/\s]+/topics/[^/\s]+")
_QUEUE = re.compile(r"projects/[^/\s]+/locations/[^/\s]+/queues/[^/\s]+")
_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")  # RFC 9110 token
_SPACE_OR_CONTROL = re.compile(r"[\s\x00-\x1f]")  # \s is str.isspace's set: one scan, not a loop per character
SECRET_NAME = re.compile(r"[A-Za-z0-9_-]{1,255}")  # Secret Manager's rule for secret ids


@dataclass(frozen=True)
class TargetRules:
    """What a target is checked against: the project's allowed hosts, the backend,
    Sundial's own service and queues (which no cloud_tasks target may name), and the
    operator's grant of identities to the project (`auth`; None: no project is known,
    as for a document checked alone, and only delivery checks the grant)."""

    allowed_hosts: tuple[str, ...] = ()
    backend: str = "local"
    own: OwnService = field(default_factory=own_service)
    project: str | None = None

    @classmethod
    def of(cls, allowed_hosts: Iterable[str], backend: str, own: OwnService | None,
           project: str | None = None) -> "TargetRules":
        """Rules for a project; `own` None reads Sundial's service from the environment."""
        return cls(tuple(allowed_hosts), backend, own_service() if own is None else own, project)


def parse_target(check: Checker, path: Path, value: Any, rules: TargetRules,
                 hook: bool = False) -> tuple[TargetSpec, timedelta]:
    """The normalized target ({kind: {...}}) and the timeout of one attempt. `hook`: an
    `on_failure` or `on_recovery` target, whose templates may also use HOOK_VARIABLES."""
    target, timeout = _parse_target(check, path, value, rules)
    if not hook:
        _refuse_hook_variables(check, path, target)
    return target, timeout


def _refuse_hook_variables(check: Checker, path: Path, target: TargetSpec) -> None:
    """A job's own target has no ended invocation to describe: `${reason}` there is an error."""
    for kind, spec in target.items():
        fields = TARGET_KIND_SPECS[kind].fields  # the texts first, then the maps' values
        texts: list[tuple[tuple[str, ...], Any]] = [
            ((field.name,), spec.get(field.name)) for field in fields if field.shape is FieldShape.TEMPLATE]
        texts += [((field.name, key), item) for field in fields if field.shape is FieldShape.TEMPLATE_MAP
                  for key, item in (spec.get(field.name) or {}).items()]
        for where, text in texts:
            for name in hook_only_variables(text) if isinstance(text, str) else ():
                check.report(path + (kind, *where), f"${{{name}}} is only for on_failure and on_recovery "
                                                    "templates, not for a job's target")


def _parse_target(check: Checker, path: Path, value: Any, rules: TargetRules) -> tuple[TargetSpec, timedelta]:
    if value is None:
        check.fail(path, f"is required: one of {', '.join(TARGET_KINDS)}, "
                         "e.g. {http: {url: https://example.com/run}}")
    target = check.mapping(path, value, "{http: {url: https://example.com/run}}")
    check.known_fields(path, target, TARGET_KINDS)
    kinds = [kind for kind in TARGET_KINDS if kind in target]
    if len(kinds) != 1:
        given = f"has {' and '.join(kinds)}" if kinds else "has none"
        check.fail(path, f"needs exactly one of {', '.join(TARGET_KINDS)}; {given}")
    kind = kinds[0]
    spec, timeout = VALIDATORS[kind](check, path + (kind,), target[kind], rules)
    return {kind.value: spec}, timeout


def _fields(check: Checker, path: Path, value: Any, kind: TargetKind, example: str) -> dict[str, Any]:
    """The kind's fields as given, after refusing a name its spec does not have."""
    fields = check.mapping(path, value, example)
    check.known_fields(path, fields, TARGET_KIND_SPECS[kind].names)
    return fields


def _given(fields: dict[str, Any], key: str, default: Any) -> Any:
    """The field's value; `default` when it is absent or null."""
    value = fields.get(key)
    return default if value is None else value


def _http(check: Checker, path: Path, value: Any, rules: TargetRules) -> tuple[dict[str, Any], timedelta]:
    fields = _fields(check, path, value, TargetKind.HTTP, "{url: https://example.com/run}")
    url = check.attempt(lambda: _url(check, path + ("url",), fields.get("url"), rules), "")
    timeout = check.attempt(lambda: _attempt_timeout(check, path + ("timeout",),
                                                     _given(fields, "timeout", "60s"), rules.backend),
                            DEFAULT_ATTEMPT_TIMEOUT)
    spec = {
        "url": url,
        "method": check.attempt(lambda: _method(check, path, fields), "POST"),
        "headers": check.attempt(lambda: _headers(check, path, fields), {}),
        "body": check.attempt(lambda: _template(check, path + ("body",),
                                                _given(fields, "body", ""),
                                                limits.MAX_BODY_BYTES), ""),
        "timeout": format_duration(timeout),
        "async": check.attempt(lambda: check.boolean(
            path + ("async",), _given(fields, "async", False)), False),
    }
    _with_cancel_url(check, path, fields, spec, rules)
    return _with_auth(check, path, fields, spec, rules), timeout


def _with_cancel_url(check: Checker, path: Path, fields: dict[str, Any], spec: dict[str, Any],
                     rules: TargetRules) -> None:
    """An async target's `cancel_url` (engine/cancels.py), checked as `url` is; in the
    spec only when given, so that a release that does not know it still reads the job."""
    if fields.get("cancel_url") is None:
        return
    where = path + ("cancel_url",)
    if spec["async"] is not True:
        check.report(where, "cancel_url is for an async target: set async: true")
        return
    spec["cancel_url"] = check.attempt(lambda: _url(check, where, fields["cancel_url"], rules), "")


def _with_auth(check: Checker, path: Path, fields: dict[str, Any], spec: dict[str, Any],
               rules: TargetRules) -> dict[str, Any]:
    """`spec` with the target's `auth` (config/auth.py), when it has one."""
    if fields.get("auth") is not None:
        spec["auth"] = check.attempt(lambda: parse_auth(check, path + ("auth",), fields["auth"], fields,
                                                        rules.backend, rules.own, rules.project), {})
    return spec


def _attempt_timeout(check: Checker, path: Path, value: Any, backend: str) -> timedelta:
    timeout = check.duration(path, value, positive=True)
    most = limits.MAX_ATTEMPT_TIMEOUT[backend]
    if timeout > most:
        check.fail(path, f"{format_duration(timeout)} is more than the {format_duration(most)} one "
                         f"attempt may take on the {backend} backend; for longer work answer 202 "
                         "and set async: true")
    return timeout


def _pubsub(check: Checker, path: Path, value: Any, rules: TargetRules) -> tuple[dict[str, Any], timedelta]:
    fields = _fields(check, path, value, TargetKind.PUBSUB, "{topic: projects/P/topics/T}")
    return {
        "topic": check.attempt(lambda: _resource(
            check, path + ("topic",), fields.get("topic"), _TOPIC, "projects/P/topics/T"), ""),
        "data": check.attempt(lambda: _template(check, path + ("data",),
                                                _given(fields, "data", ""),
                                                limits.MAX_BODY_BYTES), ""),
        "attributes": check.attempt(lambda: _attributes(check, path, fields), {}),
    }, DEFAULT_ATTEMPT_TIMEOUT


def _cloud_tasks(check: Checker, path: Path, value: Any, rules: TargetRules) -> tuple[dict[str, Any], timedelta]:
    fields = _fields(check, path, value, TargetKind.CLOUD_TASKS,
                     "{queue: projects/P/locations/L/queues/Q, url: ...}")
    queue_form = "projects/P/locations/L/queues/Q"
    spec = {
        "queue": check.attempt(lambda: _resource(
            check, path + ("queue",), fields.get("queue"), _QUEUE, queue_form), ""),
        "url": check.attempt(lambda: _url(check, path + ("url",), fields.get("url"), None), ""),
        "method": check.attempt(lambda: _method(check, path, fields), "POST"),
        "headers": check.attempt(lambda: _headers(check, path, fields), {}),
        "body": check.attempt(lambda: _template(check, path + ("body",),
                                                _given(fields, "body", ""),
                                                limits.MAX_BODY_BYTES), ""),
    }
    refused = rules.own.refusal(spec["url"] or "", spec["queue"] or "")
    if refused:
        check.report(path + (refused[0],), f"{refused[1]}: a task there would pass for one of "
                                           "Sundial's own")
    size = _task_template_bytes(spec)
    if size > limits.MAX_CLOUD_TASK_TEMPLATE_BYTES:
        check.report(path, limits.size_error("the task's url, headers and body together", size,
                                             limits.MAX_CLOUD_TASK_TEMPLATE_BYTES)
                     + " (Cloud Tasks refuses a task over 100 KB)")
    return _with_auth(check, path, fields, spec, rules), DEFAULT_ATTEMPT_TIMEOUT


def _noop(check: Checker, path: Path, value: Any, rules: TargetRules) -> tuple[dict[str, Any], timedelta]:
    if value not in (None, {}):
        check.fail(path, "takes no fields; write noop: {}")
    return {}, DEFAULT_ATTEMPT_TIMEOUT


# Each kind's validator: the normalized spec of `{kind: value}` and the timeout of one attempt.
VALIDATORS: dict[TargetKind, Callable[[Checker, Path, Any, TargetRules], tuple[dict[str, Any], timedelta]]] = {
    TargetKind.HTTP: _http,
    TargetKind.PUBSUB: _pubsub,
    TargetKind.CLOUD_TASKS: _cloud_tasks,
    TargetKind.NOOP: _noop,
}


def _task_template_bytes(spec: dict[str, Any]) -> int:
    parts = [spec["url"] or "", spec["body"] or ""]
    parts += [f"{name}{value}" for name, value in (spec["headers"] or {}).items()]
    return sum(len(part.encode("utf-8", "surrogatepass")) for part in parts)


# --- fields --------------------------------------------------------------------------

def _template(check: Checker, path: Path, value: Any, limit: int) -> str:
    text = check.string(path, value)
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > limit:
        check.fail(path, limits.size_error("the template", size, limit))
    try:
        validate_template(text)
    except TemplateError as error:
        check.fail(path, str(error))
    return text


def _url(check: Checker, path: Path, value: Any, rules: TargetRules | None) -> str:
    """An http(s) URL with a host; `rules` None skips the address rule."""
    if value is None:
        check.fail(path, "is required, e.g. https://example.com/run")
    text = _template(check, path, value, limits.MAX_URL_BYTES)
    shown = masked_url(text)  # errors are shown to readers: no credential in them
    if _SPACE_OR_CONTROL.search(text):
        check.fail(path, f"{shown!r} contains spaces or control characters")
    try:
        scheme, host, port_ok = scheme_and_host(text)
    except ValueError as error:  # urlsplit's own refusal of a broken bracketed host
        check.fail(path, f"{shown!r} has a bad host: {error}")
    if scheme not in ("http", "https"):
        check.fail(path, f"{shown!r} is not an http:// or https:// URL")
    if not port_ok:
        check.fail(path, f"{shown!r} has a bad host or port")
    if not host:
        check.fail(path, f"{shown!r} has no host")
    # A templated host is only known at delivery, which checks the address it resolves to.
    if rules is not None and "$" not in host:
        reason = refusal(host, rules.allowed_hosts, rules.backend)
        if reason:
            check.fail(path, f"host {host} is {reason}, refused as a target unless the "
                             f"project's allowed_hosts lists '{host}'")
    return text


def _method(check: Checker, path: Path, fields: dict[str, Any]) -> str:
    value = _given(fields, "method", "POST")
    if isinstance(value, str):
        value = value.upper()  # `post` means POST: methods are case-sensitive, users are not
    return check.choice(path + ("method",), value, HTTP_METHODS)


def _headers(check: Checker, path: Path, fields: dict[str, Any]) -> dict[str, Any]:
    path = path + ("headers",)
    headers = check.mapping(path, _given(fields, "headers", {}),
                            "{Content-Type: application/json}")
    _check_sizes(check, path, headers, "headers", limits.MAX_HEADERS, limits.MAX_HEADERS_BYTES)
    seen: dict[str, str] = {}
    for name, value in headers.items():
        where = path + (name,)
        if not _HEADER_NAME.fullmatch(name):
            check.report(where, f"{check.name(path)}: {name!r} is not a valid HTTP header "
                                "name", named=False)
        elif name.lower().startswith("x-sundial-"):
            check.report(where, "is set by Sundial itself (X-Sundial-* headers are reserved)")
        elif is_framing_header(name):
            check.report(where, "is a framing or hop-by-hop header, which only the HTTP "
                                "connection sets (Content-Length, Transfer-Encoding, Connection, "
                                "Keep-Alive, TE, Trailer, Upgrade, Host, Proxy-*)")
        elif name.lower() in seen:
            check.report(where, f"given twice (also as '{seen[name.lower()]}'); "
                                "header names ignore case")
        seen.setdefault(name.lower(), name)
        if isinstance(value, dict):
            check.attempt(lambda: _secret_header(check, where, value))
            continue
        text = check.attempt(lambda: _template(check, where, value, limits.MAX_HEADER_VALUE_BYTES))
        if text is not None and _breaks_header(text):
            check.report(where, _BREAKS_HEADER)
    return dict(headers)


_BREAKS_HEADER = "must not contain line breaks or NUL characters"


def _breaks_header(text: str) -> bool:
    return any(char in text for char in "\r\n\0")


def _secret_header(check: Checker, path: Path, value: dict[str, Any]) -> None:
    """`{secret: NAME, prefix: "Bearer "}`: the value is the secret's, read at delivery
    time, so that it never sits in a config file, the store or an invocation's log."""
    check.known_fields(path, value, ("secret", "prefix"))
    name = check.string(path + ("secret",), value.get("secret"), empty=False)
    if not SECRET_NAME.fullmatch(name):
        check.fail(path + ("secret",), f"{name!r} is not a secret name (letters, digits, '_' "
                                       "and '-', at most 255)")
    prefix = check.string(path + ("prefix",), value.get("prefix", ""))
    if _breaks_header(prefix):
        check.fail(path + ("prefix",), _BREAKS_HEADER)


def _attributes(check: Checker, path: Path, fields: dict[str, Any]) -> dict[str, Any]:
    path = path + ("attributes",)
    attributes = check.mapping(path, _given(fields, "attributes", {}), "{origin: sundial}")
    _check_sizes(check, path, attributes, "attributes", limits.MAX_ATTRIBUTES, None)
    for name, value in attributes.items():
        where = path + (name,)
        if name.startswith(("sundial_", "goog")):
            check.report(where, "is reserved (Sundial sets sundial_* attributes and "
                                "Pub/Sub reserves goog*)")
        if len(str(name).encode("utf-8", "surrogatepass")) > limits.MAX_ATTRIBUTE_KEY_BYTES:
            check.report(where, f"the name is longer than {limits.MAX_ATTRIBUTE_KEY_BYTES} bytes")
        check.attempt(lambda: _template(check, where, value, limits.MAX_ATTRIBUTE_VALUE_BYTES))
    return dict(attributes)


def _check_sizes(check: Checker, path: Path, entries: dict[str, Any], what: str, most: int,
                 total_limit: int | None) -> None:
    """At most `most` entries, and names plus values of at most `total_limit` bytes."""
    if len(entries) > most:
        check.report(path, limits.count_error(what, len(entries), most))
    if total_limit is None or not entries:
        return
    total = sum(len(f"{name}{value}".encode("utf-8", "surrogatepass"))  # a secret: its reference
                for name, value in entries.items())
    if total > total_limit:
        check.report(path, limits.size_error(f"all {what} together", total, total_limit))


def _resource(check: Checker, path: Path, value: Any, form: re.Pattern[str], shown: str) -> str:
    if value is None:
        check.fail(path, f"is required, in the form {shown}")
    text = check.string(path, value)
    if not form.fullmatch(text):
        check.fail(path, f"{text!r} is not of the form {shown}")
    return text
