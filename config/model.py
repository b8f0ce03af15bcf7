"""What a project config file becomes once it is loaded and validated (docs/REFERENCE.md section 2).

`ProjectConfig` is one `<configs>/<project>.yaml`; each valid job entry is a `JobConfig`
holding both the machine's `JobPolicy` and its `JobDefinition` (statemachine/definition.py),
the normalized entry (defaults applied, durations spelled canonically) that the shell
stores and delivers from. `policy.revision` is a hash of the definition's JSON form, so an
entry that did not change keeps its revision however the file around it was reformatted.

Errors are `ConfigError(file, line, message)`, printed `FILE:LINE: message`. Lines are
1-based; 0 means "no line" (a job entry that came as JSON through the API), and errors
about a file as a whole (unreadable, bad name) sit on line 1.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any

from statemachine.calendars import Calendar
from statemachine.definition import JobDefinition
from statemachine.policy import JobPolicy

__all__ = [
    "BUILTIN_DEFAULTS", "ConfigError", "JOB_ID", "JobConfig", "PROJECT_ID",
    "ProjectConfig", "ProjectConfigError",
]

# A `triggers` entry's `on`: when the triggering invocation's end starts the job.
SUCCEEDED, FAILED, FINISHED = "succeeded", "failed", "finished"
TRIGGER_CONDITIONS = (SUCCEEDED, FAILED, FINISHED)
PROJECT_ID = re.compile(r"[a-z0-9][a-z0-9-]{0,62}")
# Not only dots: `.` and `..` are path segments no browser or HTTP client sends as a name.
JOB_ID = re.compile(r"(?!\.+$)[A-Za-z0-9_.-]{1,100}")

# What a field is where neither the entry nor the project's defaults set it: JobPolicy's
# field defaults (statemachine/policy.py, the one place they are written). The fields
# JobPolicy spells otherwise (no throttle is "" there, never pausing is 0) are None here,
# as in the definition.
_BUILTIN = JobPolicy()
BUILTIN_DEFAULTS: dict[str, Any] = {
    "timezone": _BUILTIN.timezone,
    "disabled": False,
    "overlap": _BUILTIN.overlap,
    "max_concurrent": _BUILTIN.max_concurrent,
    "catchup": {"policy": _BUILTIN.catchup, "window": _BUILTIN.catchup_window},
    "timeout": _BUILTIN.timeout,
    "retry": asdict(_BUILTIN.retry),
    "fanout": asdict(_BUILTIN.fanout),
    "throttle": None,
    "triggers": _BUILTIN.triggers,
    "pause_after_failures": None,  # never pause for failures
}


@dataclass(frozen=True)
class ConfigError:
    """One problem, located in its file. `job` names the job entry it belongs to, if any."""

    file: str
    line: int
    message: str
    # Lets the importer keep a broken job's previous definition; not part of identity.
    job: str = field(default="", compare=False)

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.message}"


class ProjectConfigError(Exception):
    """The file as a whole is unusable: the project must change nothing."""

    def __init__(self, errors: list[ConfigError]) -> None:
        self.errors = list(errors)
        super().__init__("\n".join(str(error) for error in self.errors))


@dataclass(frozen=True)
class JobConfig:
    """One valid job entry."""

    id: str
    policy: JobPolicy
    """What the state machine needs; `revision` identifies `definition`."""
    definition: JobDefinition
    """The normalized entry: feeding its `to_dict()` back to parse_job_entry gives it again."""
    disabled: bool
    line: int
    """Where the entry starts in its file; 0 for entries that came through the API."""


@dataclass(frozen=True)
class ProjectConfig:
    """One project file: its settings, its valid jobs and the errors of the others."""

    project: str
    path: str
    jobs: tuple[JobConfig, ...]
    job_errors: tuple[ConfigError, ...]
    """Errors of the skipped job entries; `ConfigError.job` names the entry's id if known."""
    acl: dict[str, list[str]]
    """{"readers": [...], "triggerers": [...], "owners": [...]}, every key present."""
    allowed_hosts: tuple[str, ...]
    throttles: dict[str, int]
    """Throttle name -> max_in_flight."""
    defaults: dict[str, Any]
    """The `defaults` block, normalized and JSON-ready (only the fields it sets)."""
    content_hash: str
    """sha256 hex of the file's bytes: an unchanged file needs no import."""
    calendars: dict[str, Calendar] = field(default_factory=dict)
    """Exclusion calendar name -> calendar (the `calendars` block)."""

    @property
    def broken_job_ids(self) -> frozenset[str]:
        """Ids of entries skipped for an error: the importer keeps their older definitions."""
        return frozenset(error.job for error in self.job_errors if error.job)

    def job(self, job_id: str) -> JobConfig | None:
        return next((job for job in self.jobs if job.id == job_id), None)

    def settings(self) -> dict[str, Any]:
        """The project-wide settings, JSON-ready; parse_job_entry accepts this form too."""
        return {
            "acl": {role: list(members) for role, members in self.acl.items()},
            "allowed_hosts": list(self.allowed_hosts),
            "throttles": dict(self.throttles),
            "defaults": self.defaults,
            # Only when set, so the stored settings of a project without calendars stay as they were.
            **({"calendars": {name: calendar.to_dict() for name, calendar in self.calendars.items()}}
               if self.calendars else {}),
        }
