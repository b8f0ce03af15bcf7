"""A job's definition: its config entry, checked and normalized, as the shell keeps it.

config/jobs.py builds one from a job entry with every default applied. Its JSON form
(`to_dict`) is what the stores hold, what the API's Job and the UI's pages show, and what
`JobPolicy.revision` hashes, so that form must not drift: `from_dict(d).to_dict() == d`,
key order included, for every `d` config/jobs.py makes or has made. (The fields added
after the first release, `pause_after_failures`, `on_failure`, `on_recovery`, `description`,
`labels`, `jitter`, `start`, `end` and `exclude`, are written only when set, so that a job which does
not use them keeps its revision.)

Values keep their JSON spelling where that spelling is what is stored and shown:
durations are canonical text (`1m30s`), `at` times RFC 3339 UTC text, and target specs
(`{"http": {...}}`) the dicts config/targets.py checked, whose fields the shell's
template rendering reads one by one. The machine's typed reading of the same entry is
`JobPolicy`; its field defaults are the builtin defaults, and the defaults here are
spelled from them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cached_property
from json.encoder import encode_basestring
from typing import Any, Callable, Mapping, TypeVar

from statemachine.durations import format_duration
from statemachine.policy import Catchup, JobPolicy, Overlap
from statemachine.stored_form import later_fields, with_later
from statemachine.vocabulary import TargetKind

__all__ = ["CatchupSpec", "FanoutSpec", "JobDefinition", "RetrySpec", "TargetSpec"]

T = TypeVar("T")

# {kind: {field: value}} with exactly one TargetKind as its key; JSON-ready. Shared, not
# copied, by from_dict and to_dict: nothing may change one in place.
TargetSpec = dict[str, Any]

_BUILTIN = JobPolicy()  # the builtin defaults (statemachine/policy.py)


@dataclass(frozen=True)
class CatchupSpec:
    """What happens to occurrences whose time passed while nothing ran."""

    policy: Catchup = _BUILTIN.catchup  # none | latest | all of them run late
    window: str = format_duration(_BUILTIN.catchup_window)  # how late a missed occurrence may still run


@dataclass(frozen=True)
class RetrySpec:
    """The attempts of one delivery, with exponential backoff between them."""

    max_attempts: int = _BUILTIN.retry.max_attempts  # attempts in all, the first included
    min_backoff: str = format_duration(_BUILTIN.retry.min_backoff)  # the wait after the first failure
    max_backoff: str = format_duration(_BUILTIN.retry.max_backoff)  # the longest wait between attempts


@dataclass(frozen=True)
class FanoutSpec:
    """How many events one occurrence sends, and over how long."""

    count: int = _BUILTIN.fanout.count  # events per occurrence
    spread: str = format_duration(_BUILTIN.fanout.spread)  # event i is due at its time + i * spread / count


@dataclass(frozen=True)
class JobDefinition:
    """One job entry, normalized: every field set, defaults included."""

    id: str  # the job's id in its project
    target: TargetSpec  # where each event of an occurrence is delivered
    schedule: str | None = None  # single-spaced schedule text ("triggered": only when triggered); None with `at`
    at: tuple[str, ...] | None = None  # one-off times, sorted RFC 3339 UTC text; None with `schedule`
    timezone: str = _BUILTIN.timezone  # the IANA zone the schedule and the templates read times in
    disabled: bool = False  # the entry says `disabled: true`: no new occurrences
    overlap: Overlap = _BUILTIN.overlap  # what an occurrence does while another invocation is active
    max_concurrent: int = _BUILTIN.max_concurrent  # invocations active at once; above 1 only with overlap allow
    catchup: CatchupSpec = CatchupSpec()  # what missed occurrences do
    timeout: str = format_duration(_BUILTIN.timeout)  # how long an invocation may take, attempts included
    retry: RetrySpec = RetrySpec()  # how a failed attempt is tried again
    fanout: FanoutSpec = FanoutSpec()  # events per occurrence
    throttle: str | None = None  # the project throttle its deliveries count against; None: none
    # The project's jobs an invocation of this one starts when it ends: an id for "when it
    # succeeds" (as before conditions existed), {"job": id, "on": "failed"|"finished"} otherwise.
    triggers: tuple[str | dict[str, str], ...] = ()
    pause_after_failures: int | None = None  # pause after this many FAILED invocations in a row; None: never
    on_failure: TargetSpec | None = None  # where a FAILED invocation's notification goes; None: nowhere
    on_recovery: TargetSpec | None = None  # where the first success after failures is told; None: nowhere
    description: str | None = None  # free text shown with the job
    labels: dict[str, str] | None = None  # key: value tags to show and filter by; None: none
    jitter: str | None = None  # each occurrence's delivery is delayed up to this; None: not at all
    start: str | None = None  # RFC 3339 UTC: no occurrence before it; None: unbounded
    end: str | None = None  # RFC 3339 UTC: no occurrence after it (then the job is DONE)
    # The exclusion calendars the job names, each copied in full ({name, timezone, dates,
    # ranges}: statemachine/calendars.py), so that a change to one changes the revision.
    exclude: tuple[dict[str, Any], ...] | None = None
    # Fan-in: the project's jobs that must each succeed for a scheduled time before this
    # one runs for it, and how long they have (a duration's text); None: not a fan-in job.
    after: tuple[str, ...] | None = None
    after_window: str | None = None
    # Top-level fields of a later release's definition, which this one does not know: kept
    # as read (JSON text, "" for none) and written back after its own, so that a reader one
    # release ahead reads what the next release writes (docs/DEPLOY.md, rolling back).
    later: str = ""

    def __post_init__(self) -> None:
        if (self.schedule is None) == (self.at is None):
            raise ValueError(f"job definition {self.id!r}: needs exactly one of schedule and at")
        _target_kind("target", self.target)
        for name, hook in (("on_failure", self.on_failure), ("on_recovery", self.on_recovery)):
            if hook is not None:
                _target_kind(name, hook)

    @property
    def trigger_targets(self) -> tuple[str, ...]:
        """The ids of the jobs it may trigger, whatever the condition."""
        return tuple(dict.fromkeys(item if isinstance(item, str) else item["job"] for item in self.triggers))

    @property
    def target_kind(self) -> TargetKind:
        return _target_kind("target", self.target)

    @cached_property
    def canonical_json(self) -> str:
        """`to_dict()` as JSON with sorted keys, no spaces and non-ASCII as is: what the
        revision hashes (config/jobs.py), and what the SQLite store keeps when it is all
        ASCII, so that importing a job encodes its definition once. Kept on the object,
        which is frozen; a changed copy (dataclasses.replace) encodes its own."""
        try:
            return _spelled(self)
        except (TypeError, ValueError, AttributeError):  # a field not of its type: the encoder decides
            return _CANONICAL.encode(self.to_dict())

    def to_dict(self) -> dict[str, Any]:
        """The JSON form, in the order config/jobs.py always wrote it (see the module's doc)."""
        data: dict[str, Any] = {"id": self.id}
        if self.at is not None:
            data["at"] = list(self.at)
        else:
            data["schedule"] = self.schedule
        data.update({
            "timezone": self.timezone,
            "disabled": self.disabled,
            "overlap": self.overlap.value,
            "max_concurrent": self.max_concurrent,
            "catchup": {"policy": self.catchup.policy.value, "window": self.catchup.window},
            "timeout": self.timeout,
            "retry": {"max_attempts": self.retry.max_attempts, "min_backoff": self.retry.min_backoff,
                      "max_backoff": self.retry.max_backoff},
            "fanout": {"count": self.fanout.count, "spread": self.fanout.spread},
            "throttle": self.throttle,
            "triggers": list(self.triggers),
            "target": self.target,
        })
        if self.pause_after_failures is not None:
            data["pause_after_failures"] = self.pause_after_failures
        if self.on_failure is not None:
            data["on_failure"] = self.on_failure
        if self.on_recovery is not None:
            data["on_recovery"] = self.on_recovery
        for key in _OPTIONAL_TEXT:
            if getattr(self, key) is not None:
                data[key] = getattr(self, key)
        if self.exclude is not None:
            data["exclude"] = list(self.exclude)
        if self.after is not None:
            data["after"], data["after_window"] = list(self.after), self.after_window
        return with_later(data, self.later)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> JobDefinition:
        """The definition whose JSON form is `data`.

        :raises ValueError: a field to_dict always writes is missing, or one it never
            writes is present inside a nested object, or a value is not of its field's type.
            An unknown top-level field is a later release's: kept in `later`.
        """
        fields = _Fields("", data, _KEYS, later_ok=True)
        catchup, retry, fanout = (_Fields(name, fields.get(name, dict), keys)
                                  for name, keys in _NESTED.items())
        return cls(
            id=fields.get("id", str),
            schedule=fields.optional("schedule", str),
            at=tuple(fields.items("at", str)) if "at" in data else None,
            timezone=fields.get("timezone", str),
            disabled=fields.get("disabled", bool),
            overlap=Overlap(fields.get("overlap", str)),
            max_concurrent=fields.get("max_concurrent", int),
            catchup=CatchupSpec(Catchup(catchup.get("policy", str)), catchup.get("window", str)),
            timeout=fields.get("timeout", str),
            retry=RetrySpec(retry.get("max_attempts", int), retry.get("min_backoff", str),
                            retry.get("max_backoff", str)),
            fanout=FanoutSpec(fanout.get("count", int), fanout.get("spread", str)),
            throttle=fields.nullable("throttle", str),
            triggers=tuple(_trigger(item) for item in fields.get("triggers", list)),
            target=fields.get("target", dict),
            pause_after_failures=fields.optional("pause_after_failures", int),
            on_failure=fields.optional("on_failure", dict),
            on_recovery=fields.optional("on_recovery", dict),
            labels=fields.optional("labels", dict),
            description=fields.optional("description", str),
            jitter=fields.optional("jitter", str),
            start=fields.optional("start", str),
            end=fields.optional("end", str),
            exclude=tuple(fields.items("exclude", dict)) if "exclude" in data else None,
            after=tuple(fields.items("after", str)) if "after" in data else None,
            after_window=fields.optional("after_window", str),
            later=later_fields(data, _KEYS),
        )


_KEYS = frozenset({"id", "schedule", "at", "timezone", "disabled", "overlap", "max_concurrent", "catchup",
                   "timeout", "retry", "fanout", "throttle", "triggers", "target", "pause_after_failures",
                   "on_failure", "on_recovery", "description", "labels", "jitter", "start", "end",
                   "exclude", "after", "after_window"})
# Written only when set (as pause_after_failures and on_failure), in this order.
# json.dumps builds an encoder per call when given options: this one is built once.
_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)
_string = encode_basestring  # the encoder's own escaping of a string (ensure_ascii=False)
_OPTIONAL_TEXT = ("description", "labels", "jitter", "start", "end")
_NESTED = {
    "catchup": frozenset({"policy", "window"}),
    "retry": frozenset({"max_attempts", "min_backoff", "max_backoff"}),
    "fanout": frozenset({"count", "spread"}),
}


_TARGET_KINDS = frozenset(kind.value for kind in TargetKind)


def _spelled(d: JobDefinition) -> str:
    """`_CANONICAL.encode(d.to_dict())` spelled key by key in sorted order, with the
    encoder's own string escaping and encoding for the user's maps (a third less time:
    every job of an import hashes its definition). tests/local/test_definition_text.py
    holds it equal to the encoder's text with every field set.

    :raises TypeError: a field is not of its type, or a later release's fields are kept
        (the caller encodes the dict then)."""
    catchup, retry, fanout = d.catchup, d.retry, d.fanout
    if d.later or not (_ints(d.max_concurrent, retry.max_attempts, fanout.count) and type(d.disabled) is bool
            and (d.pause_after_failures is None or _ints(d.pause_after_failures))):
        raise TypeError("a field is not of its type")
    text = "{" + _optional("after", d.after, _strings) + _optional("after_window", d.after_window)
    text += ("" if d.at is None else '"at":' + _strings(d.at) + ",") + \
        f'"catchup":{{"policy":{_string(catchup.policy.value)},"window":{_string(catchup.window)}}},'
    text += _optional("description", d.description) + f'"disabled":{"true" if d.disabled else "false"},'
    text += _optional("end", d.end) + _optional("exclude", d.exclude, _CANONICAL.encode)
    text += f'"fanout":{{"count":{fanout.count:d},"spread":{_string(fanout.spread)}}},'
    text += f'"id":{_string(d.id)},' + _optional("jitter", d.jitter) + _optional("labels", d.labels, _CANONICAL.encode)
    text += f'"max_concurrent":{d.max_concurrent:d},' + _optional("on_failure", d.on_failure, _CANONICAL.encode)
    text += _optional("on_recovery", d.on_recovery, _CANONICAL.encode) + f'"overlap":{_string(d.overlap.value)},'
    text += _optional("pause_after_failures", d.pause_after_failures, "{:d}".format)
    text += (f'"retry":{{"max_attempts":{retry.max_attempts:d},"max_backoff":{_string(retry.max_backoff)},'
             f'"min_backoff":{_string(retry.min_backoff)}}},')
    text += _optional("schedule", d.schedule) + _optional("start", d.start)  # schedule: when there is no `at`
    throttle = "null" if d.throttle is None else _string(d.throttle)
    return text + (f'"target":{_target(d.target)},"throttle":{throttle},"timeout":{_string(d.timeout)},'
                   f'"timezone":{_string(d.timezone)},"triggers":{_triggers(d.triggers)}}}')


_HTTP_KEYS = frozenset({"async", "body", "headers", "method", "timeout", "url"})


def _target(target: TargetSpec) -> str:
    """An http target (what most jobs have) spelled in sorted order; any other through
    the encoder."""
    spec = target.get("http")
    if len(target) != 1 or type(spec) is not dict or spec.keys() - {"auth"} != _HTTP_KEYS \
            or type(spec["async"]) is not bool or type(spec["headers"]) is not dict:
        return _CANONICAL.encode(target)
    auth = f'"auth":{_CANONICAL.encode(spec["auth"])},' if "auth" in spec else ""
    headers = _CANONICAL.encode(spec["headers"]) if spec["headers"] else "{}"
    return (f'{{"http":{{"async":{"true" if spec["async"] else "false"},{auth}"body":{_string(spec["body"])},'
            f'"headers":{headers},"method":{_string(spec["method"])},"timeout":{_string(spec["timeout"])},'
            f'"url":{_string(spec["url"])}}}}}')


def _ints(*values: Any) -> bool:
    return all(type(value) is int for value in values)


def _optional(key: str, value: Any, spell: Callable[[Any], str] = encode_basestring) -> str:
    """`"key":value,` for a field written only when set; "" when it is not."""
    return "" if value is None else f'"{key}":{spell(value)},'


def _triggers(values: tuple[str | dict[str, str], ...]) -> str:
    """Ids spelled here; an entry with a condition (a map) through the encoder."""
    return "[" + ",".join(_string(value) if isinstance(value, str) else _CANONICAL.encode(value)
                          for value in values) + "]"


def _strings(values: tuple[str, ...]) -> str:
    return "[" + ",".join(_string(value) for value in values) + "]"


def _trigger(item: Any) -> str | dict[str, str]:
    if isinstance(item, str) or (isinstance(item, dict) and item.keys() == {"job", "on"}
                                 and all(isinstance(value, str) for value in item.values())):
        return item
    raise ValueError(f"job definition: triggers is {item!r}, not a str nor {{job, on}}")


def _target_kind(name: str, spec: TargetSpec) -> TargetKind:
    if not isinstance(spec, dict) or len(spec) != 1 or next(iter(spec)) not in _TARGET_KINDS:
        raise ValueError(f"job definition: {name} must be {{kind: {{...}}}} with one of "
                         f"{', '.join(TargetKind)}, got {sorted(spec)}")
    return TargetKind(next(iter(spec)))


class _Fields:
    """Typed reads of one JSON object of a stored definition; errors name the field."""

    def __init__(self, path: str, data: Mapping[str, Any], known: frozenset[str], later_ok: bool = False) -> None:
        self._path, self._data = path, data
        unknown = sorted(set(data) - known)
        if unknown and not later_ok:
            raise ValueError(f"job definition: unknown field(s) {', '.join(self._name(k) for k in unknown)}")

    def _name(self, key: str) -> str:
        return f"{self._path}.{key}" if self._path else key

    def get(self, key: str, kind: type[T]) -> T:
        """A field that is always written, never null."""
        return self._checked(key, self._present(key), kind)

    def nullable(self, key: str, kind: type[T]) -> T | None:
        """A field that is always written, null for "none"."""
        value = self._present(key)
        return None if value is None else self._checked(key, value, kind)

    def optional(self, key: str, kind: type[T]) -> T | None:
        """A field that is written only when set."""
        return self.get(key, kind) if key in self._data else None

    def _present(self, key: str) -> Any:
        if key not in self._data:
            raise ValueError(f"job definition: {self._name(key)} is missing")
        return self._data[key]

    def items(self, key: str, kind: type[T]) -> list[T]:
        return [self._checked(key, item, kind) for item in self.get(key, list)]

    def _checked(self, key: str, value: Any, kind: type[T]) -> T:
        # bool is an int to Python, not to JSON: `max_concurrent: true` is not a number.
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise ValueError(f"job definition: {self._name(key)} is {value!r}, not a {kind.__name__}")
        return value
