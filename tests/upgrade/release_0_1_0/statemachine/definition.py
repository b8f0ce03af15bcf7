"""A job's definition: its config entry, checked and normalized, as the shell keeps it.

config/jobs.py builds one from a job entry with every default applied. Its JSON form
(`to_dict`) is what the stores hold, what the API's Job and the UI's pages show, and what
`JobPolicy.revision` hashes, so that form must not drift: `from_dict(d).to_dict() == d`,
key order included, for every `d` config/jobs.py makes or has made. (The fields added
after the first release, `pause_after_failures` and `on_failure`, are written only when
set, so that a job which does not use them keeps its revision.)

Values keep their JSON spelling where that spelling is what is stored and shown:
durations are canonical text (`1m30s`), `at` times RFC 3339 UTC text, and target specs
(`{"http": {...}}`) the dicts config/targets.py checked, whose fields the shell's
template rendering reads one by one. The machine's typed reading of the same entry is
`JobPolicy`; its field defaults are the builtin defaults, and the defaults here are
spelled from them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, TypeVar

from statemachine.durations import format_duration
from statemachine.policy import Catchup, JobPolicy, Overlap
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
    triggers: tuple[str, ...] = ()  # the project's jobs a success of this one starts
    pause_after_failures: int | None = None  # pause after this many FAILED invocations in a row; None: never
    on_failure: TargetSpec | None = None  # where a FAILED invocation's notification goes; None: nowhere

    def __post_init__(self) -> None:
        if (self.schedule is None) == (self.at is None):
            raise ValueError(f"job definition {self.id!r}: needs exactly one of schedule and at")
        _target_kind("target", self.target)
        if self.on_failure is not None:
            _target_kind("on_failure", self.on_failure)

    @property
    def target_kind(self) -> TargetKind:
        return _target_kind("target", self.target)

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
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> JobDefinition:
        """The definition whose JSON form is `data`.

        :raises ValueError: a field to_dict always writes is missing, or one it never
            writes is present, or a value is not of its field's type.
        """
        fields = _Fields("", data, _KEYS)
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
            triggers=tuple(fields.items("triggers", str)),
            target=fields.get("target", dict),
            pause_after_failures=fields.optional("pause_after_failures", int),
            on_failure=fields.optional("on_failure", dict),
        )


_KEYS = frozenset({"id", "schedule", "at", "timezone", "disabled", "overlap", "max_concurrent", "catchup",
                   "timeout", "retry", "fanout", "throttle", "triggers", "target", "pause_after_failures",
                   "on_failure"})
_NESTED = {
    "catchup": frozenset({"policy", "window"}),
    "retry": frozenset({"max_attempts", "min_backoff", "max_backoff"}),
    "fanout": frozenset({"count", "spread"}),
}


_TARGET_KINDS = frozenset(kind.value for kind in TargetKind)


def _target_kind(name: str, spec: TargetSpec) -> TargetKind:
    if not isinstance(spec, dict) or len(spec) != 1 or next(iter(spec)) not in _TARGET_KINDS:
        raise ValueError(f"job definition: {name} must be {{kind: {{...}}}} with one of "
                         f"{', '.join(TargetKind)}, got {sorted(spec)}")
    return TargetKind(next(iter(spec)))


class _Fields:
    """Typed reads of one JSON object of a stored definition; errors name the field."""

    def __init__(self, path: str, data: Mapping[str, Any], known: frozenset[str]) -> None:
        self._path, self._data = path, data
        unknown = sorted(set(data) - known)
        if unknown:
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
