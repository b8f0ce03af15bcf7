"""Render a job's target definition for one delivery (CONTRACT section 4).

Template variables are substituted in exactly these places: `url`, `body` and `data`,
the values of `headers` and the values of `attributes`. Everything else (method,
timeout, async, queue, topic, header and attribute names, ...) is copied unchanged:
those are configuration, not payload, and a `${` in them means what it says.

Pure: standard library and the core's template module only. Substitution is the core's
single pass, so nothing in a value is ever evaluated or expanded twice.
"""

from __future__ import annotations

import copy

from statemachine.template import TemplateContext, render

# Fields holding one templated string, whatever the target kind.
_TEXT_FIELDS = ("url", "body", "data")
# Fields holding a mapping whose values are templated (names are not).
_MAP_FIELDS = ("headers", "attributes")


class HeaderInjectionError(ValueError):
    """A rendered header value would split the HTTP header block (CR or LF in it)."""


def render_target(target: dict, context: TemplateContext) -> dict:
    """A deep copy of `target` ({kind: {...}}) with its templated fields rendered.

    :raises TemplateError: a template that does not validate (config import should
        have refused it; a delivery that gets here must fail, not send raw text).
    :raises HeaderInjectionError: a rendered header value contains CR or LF.
    """
    return {
        kind: _render_spec(spec, context) if isinstance(spec, dict) else copy.deepcopy(spec)
        for kind, spec in target.items()
    }


def _render_spec(spec: dict, context: TemplateContext) -> dict:
    out = {}
    for name, value in spec.items():
        if name in _TEXT_FIELDS and isinstance(value, str):
            out[name] = render(value, context)
        elif name in _MAP_FIELDS and isinstance(value, dict):
            out[name] = {key: _render_value(item, context) for key, item in value.items()}
        else:
            out[name] = copy.deepcopy(value)
    if isinstance(out.get("headers"), dict):
        _refuse_line_breaks(out["headers"])
    return out


def _render_value(value: object, context: TemplateContext) -> object:
    # Non-string values (a YAML number, say) are copied; the target stringifies them.
    return render(value, context) if isinstance(value, str) else copy.deepcopy(value)


def _refuse_line_breaks(headers: dict) -> None:
    """Refuse CR/LF in header names and values: they would let text forge headers."""
    for name, value in headers.items():
        for part, text in (("name", str(name)), ("value", str(value))):
            if "\r" in text or "\n" in text:
                raise HeaderInjectionError(
                    f"header {str(name)!r}: its rendered {part} contains a line break (CR or LF)"
                )
