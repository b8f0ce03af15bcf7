"""Render a job's target definition for one delivery (docs/REFERENCE.md section 4).

Template variables are substituted in exactly the fields each kind's spec calls
templated (statemachine/target_kinds.py): `url`, `body` and `data`, the values of
`headers` and the values of `attributes`. Everything else (method, timeout, async,
queue, topic, header and attribute names, ...) is copied unchanged: those are
configuration, not payload, and a `${` in them means what it says. A secret-bearing
map (`headers`) may name secrets for its values.

A hook (`on_failure`, `on_recovery`: the context has `hook` values) is rendered with two
escapes, because its values quote the target's answers: in a JSON body (`json_body`) every
substituted value is JSON-string-escaped, and in a header value line breaks become spaces.
A hook's JSON body without a Content-Type header is sent as `application/json`.

Pure: standard library and the core's template module only. Substitution is the core's
single pass, so nothing in a value is ever evaluated or expanded twice.
"""

from __future__ import annotations

import copy
import re
from typing import Any, Callable, Mapping

from engine.ports import SecretReader
from statemachine.definition import TargetSpec
from statemachine.target_kinds import FieldShape, TargetField, kind_spec
from statemachine.template import TemplateContext, json_escape, render

_COPIED = TargetField("", FieldShape.TEXT)  # a field the kind's spec does not have is copied as it is


class HeaderInjectionError(ValueError):
    """A rendered header value would split the HTTP header block (CR or LF in it)."""


def render_target(target: TargetSpec, context: TemplateContext, secrets: SecretReader | None = None) -> TargetSpec:
    """A deep copy of `target` ({kind: {...}}) with its templated fields rendered, and
    header values that name a secret (`{secret: NAME, prefix: P}`) replaced by P + the
    value of the job's project's secret NAME, read as `secrets(context.project, NAME)`.

    :raises TemplateError: a template that does not validate (config import should
        have refused it; a delivery that gets here must fail, not send raw text).
    :raises HeaderInjectionError: a rendered header value contains CR or LF.
    :raises SecretError: (a ValueError) a named secret that cannot be read.
    """
    return {
        kind: _render_spec(kind, spec, context, secrets) if isinstance(spec, dict) else copy.deepcopy(spec)
        for kind, spec in target.items()
    }


def _render_spec(kind: str, spec: dict[str, Any], context: TemplateContext,
                 secrets: SecretReader | None) -> dict[str, object]:
    hook = context.hook is not None
    json_payload = hook and json_body(spec)
    fields = kind_spec(kind)
    out: dict[str, object] = {}
    for name, value in spec.items():
        field = fields.field(name) or _COPIED
        if field.templated_text and isinstance(value, str):
            out[name] = render(value, context, json_escape if json_payload and field.payload else None)
        elif field.shape is FieldShape.TEMPLATE_MAP and isinstance(value, dict):
            out[name] = _render_map(value, field.secret, context, secrets)
        else:
            out[name] = copy.deepcopy(value)
    headers = out.get("headers")
    if isinstance(headers, dict):
        _refuse_line_breaks(headers)
        if json_payload and _content_type(headers) is None:
            out["headers"] = {**headers, "Content-Type": "application/json"}
    return out


def _render_map(values: Mapping[str, object], secret: bool, context: TemplateContext,
                secrets: SecretReader | None) -> dict[str, object]:
    """A templated map's values rendered. A secret-bearing one holds header values: a
    value may name a secret, and in a hook each is kept to one line."""
    if not secret:
        return {key: _render_value(item, context) for key, item in values.items()}
    one_line = _one_line if context.hook is not None else None
    return {key: _secret_value(item, context.project, secrets) if isinstance(item, dict)
            else _render_value(item, context, one_line) for key, item in values.items()}


def json_body(spec: Mapping[str, object]) -> bool:
    """Whether a hook's `body` (or Pub/Sub `data`) template is JSON: its Content-Type
    header says so (`application/json`, `…+json`), or, without one, the template's
    first non-blank character is `{` or `[`."""
    template = spec.get("body", spec.get("data"))
    if not isinstance(template, str):
        return False
    headers = spec.get("headers")
    declared = _content_type(headers) if isinstance(headers, dict) else None
    if isinstance(declared, str):
        media = declared.split(";", 1)[0].strip().lower()
        return media == "application/json" or media.endswith("+json")
    return template.lstrip()[:1] in ("{", "[")


def _content_type(headers: Mapping[str, object]) -> object:
    return next((value for name, value in headers.items() if str(name).lower() == "content-type"), None)


def _one_line(value: str) -> str:
    # A hook's values quote answers of the target's: a line break there must not make
    # the whole notification undeliverable (it would be refused as header injection).
    return re.sub(r"[\r\n\0]+", " ", value)


def _render_value(value: object, context: TemplateContext, escape: Callable[[str], str] | None = None) -> object:
    # Non-string values (a YAML number, say) are copied; the target stringifies them.
    return render(value, context, escape) if isinstance(value, str) else copy.deepcopy(value)


def _secret_value(reference: Mapping[str, object], project: str, secrets: SecretReader | None) -> str:
    # Never templated: a secret's text is sent as it is, and a `${` in it means nothing.
    from engine.secrets import UnknownSecret

    name = str(reference.get("secret", ""))
    if secrets is None:  # a server without a secret store has no secrets at all
        raise UnknownSecret(name)
    return str(reference.get("prefix", "")) + secrets(project, name)


def secret_backed_headers(target: Mapping[str, object]) -> frozenset[str]:
    """The names of the headers whose values come from secrets, for redaction."""
    spec = next(iter(target.values()), None) if target else None
    headers = spec.get("headers") if isinstance(spec, dict) else None
    return frozenset(name for name, value in (headers or {}).items() if isinstance(value, dict))


def _refuse_line_breaks(headers: Mapping[str, object]) -> None:
    """Refuse CR/LF in header names and values: they would let text forge headers."""
    for name, value in headers.items():
        for part, text in (("name", str(name)), ("value", str(value))):
            if "\r" in text or "\n" in text:
                raise HeaderInjectionError(
                    f"header {str(name)!r}: its rendered {part} contains a line break (CR or LF)"
                )
