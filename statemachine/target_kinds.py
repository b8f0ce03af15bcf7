"""What each target kind's definition holds: one spec per `TargetKind`, read by everything
that treats a target's fields by their nature rather than by their name.

- validation (config/targets.py) accepts exactly these field names, and refuses a
  `${reason}` outside a hook in the templated ones;
- the JSON Schema of project files (config/schema.py), and the OpenAPI document built
  from it (web/openapi_schemas.py), describe exactly these fields, with the same
  required ones;
- rendering (engine/rendering.py) substitutes template variables in the templated
  fields only, and reads secret references in a secret-bearing map;
- what an attempt's log keeps (engine/sent.py) and what a reader is shown
  (engine/masking.py) mask the secret-bearing fields, and cut the payload.

A new kind is its member in statemachine/vocabulary.py, its entry here, its validator
(config/targets.py `VALIDATORS`) and its sender (engine/targets/__init__.py `SENDERS`);
tests/config/test_target_kinds.py fails while one of them is missing, or while the
validator and the two schemas disagree with the spec.

Pure data: no I/O, nothing outward.
"""

from __future__ import annotations

from dataclasses import dataclass
from dataclasses import field as dataclass_field
from enum import StrEnum
from types import MappingProxyType
from typing import Mapping

from statemachine.vocabulary import TargetKind

__all__ = ["FieldShape", "KindSpec", "TARGET_KIND_SPECS", "TargetField", "kind_spec"]


class FieldShape(StrEnum):
    """What a field's value is, which decides how it is rendered, checked and described."""

    TEXT = "text"  # a plain string, sent as written: a `${` in it means what it says
    TEMPLATE = "template"  # one templated string (docs/REFERENCE.md section 4)
    URL = "url"  # a templated http(s) URL, whose password and credential-like query values are masked
    TEMPLATE_MAP = "template map"  # a mapping whose values are templated; its names are not
    CHOICE = "choice"  # one word of a fixed list (an HTTP method)
    DURATION = "duration"  # `<number><unit>...`
    BOOLEAN = "boolean"
    AUTH = "auth"  # a token for a service account, minted at every attempt (config/auth.py)

    @property
    def json_type(self) -> str:
        """The JSON type of a value of this shape, as both schemas describe it."""
        return _JSON_TYPES[self]


_JSON_TYPES = {FieldShape.TEXT: "string", FieldShape.TEMPLATE: "string", FieldShape.URL: "string",
               FieldShape.TEMPLATE_MAP: "object", FieldShape.CHOICE: "string", FieldShape.DURATION: "string",
               FieldShape.BOOLEAN: "boolean", FieldShape.AUTH: "object"}


@dataclass(frozen=True)
class TargetField:
    """One field of a target kind.

    `secret`: the field may carry a credential, so it is masked wherever it is stored
    or shown: a URL's password and credential-like query values, every header value but
    a harmless few's (and a map's values may name secrets, read at delivery), an `auth`
    token. `payload`: the field carries the request's payload, the one a hook with
    nothing there is sent the invocation's summary in, and the one the log cuts short.
    """

    name: str
    shape: FieldShape
    required: bool = False
    secret: bool = False
    payload: bool = False

    @property
    def templated(self) -> bool:
        """Whether template variables are substituted in it (in a map: in its values)."""
        return self.shape in (FieldShape.TEMPLATE, FieldShape.URL, FieldShape.TEMPLATE_MAP)

    @property
    def templated_text(self) -> bool:
        """Whether it is one templated string (a URL among them)."""
        return self.shape in (FieldShape.TEMPLATE, FieldShape.URL)


@dataclass(frozen=True)
class KindSpec:
    """The fields of one target kind, in the order documents list them."""

    kind: str  # a TargetKind; "" for one this release does not know
    fields: tuple[TargetField, ...]
    _by_name: dict[str, TargetField] = dataclass_field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # `field` is asked once per field of every delivery's target: a lookup, not a scan.
        object.__setattr__(self, "_by_name", {field.name: field for field in self.fields})

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(field.name for field in self.fields)

    @property
    def required(self) -> tuple[str, ...]:
        return tuple(field.name for field in self.fields if field.required)

    @property
    def payload_field(self) -> str:
        """The field that carries the request's payload ("" for none)."""
        return next((field.name for field in self.fields if field.payload), "")

    def field(self, name: str) -> TargetField | None:
        """The field called `name`; None for a name the kind does not have."""
        return self._by_name.get(name)


_URL = TargetField("url", FieldShape.URL, required=True, secret=True)
_METHOD = TargetField("method", FieldShape.CHOICE)
_HEADERS = TargetField("headers", FieldShape.TEMPLATE_MAP, secret=True)
_BODY = TargetField("body", FieldShape.TEMPLATE, payload=True)
_AUTH = TargetField("auth", FieldShape.AUTH, secret=True)

_SPECS = (
    KindSpec(TargetKind.HTTP, (_URL, _METHOD, _HEADERS, _BODY, TargetField("timeout", FieldShape.DURATION),
                               TargetField("async", FieldShape.BOOLEAN), _AUTH,
                               TargetField("cancel_url", FieldShape.URL, secret=True))),
    KindSpec(TargetKind.PUBSUB, (TargetField("topic", FieldShape.TEXT, required=True),
                                 TargetField("data", FieldShape.TEMPLATE, payload=True),
                                 TargetField("attributes", FieldShape.TEMPLATE_MAP))),
    KindSpec(TargetKind.CLOUD_TASKS, (TargetField("queue", FieldShape.TEXT, required=True),
                                      _URL, _METHOD, _HEADERS, _BODY, _AUTH)),
    KindSpec(TargetKind.NOOP, ()),
)

TARGET_KIND_SPECS: Mapping[str, KindSpec] = MappingProxyType({spec.kind: spec for spec in _SPECS})


def kind_spec(kind: str) -> KindSpec:
    """The spec of a stored target's kind. A kind this release does not know (written by
    a later one) is read by the fields of every kind it knows, by name, so that its url
    and headers are still masked wherever it is shown."""
    return TARGET_KIND_SPECS.get(kind) or _ANY_KIND


_ANY_KIND = KindSpec("", tuple({field.name: field for spec in reversed(_SPECS) for field in spec.fields}.values()))
