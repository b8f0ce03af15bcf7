"""What a project config file becomes once it is loaded and validated (CONTRACT section 2).

`ProjectConfig` is one `<configs>/<project>.yaml`; each valid job entry is a `JobConfig`
holding both the machine's `JobPolicy` and `definition`, the normalized entry as
JSON-ready data (defaults applied, durations spelled canonically) that the shell stores
and delivers from. `policy.revision` is a hash of `definition`, so an entry that did not
change keeps its revision however the file around it was reformatted.

Errors are `ConfigError(file, line, message)`, printed `FILE:LINE: message`. Lines are
1-based; 0 means "no line" (a job entry that came as JSON through the API), and errors
about a file as a whole (unreadable, bad name) sit on line 1.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import timedelta

from statemachine.policy import Catchup, JobPolicy, Overlap

__all__ = [
    "BUILTIN_DEFAULTS", "ConfigError", "JOB_ID", "JobConfig", "PROJECT_ID",
    "ProjectConfig", "ProjectConfigError",
]

PROJECT_ID = re.compile(r"[a-z0-9][a-z0-9-]{0,62}")
# Not only dots: `.` and `..` are path segments no browser or HTTP client sends as a name.
JOB_ID = re.compile(r"(?!\.+$)[A-Za-z0-9_.-]{1,100}")

# Where the contract is silent these follow Cloud Scheduler and Temporal: one attempt,
# no overlap, catch up the latest missed occurrence of the last hour.
BUILTIN_DEFAULTS: dict = {
    "timezone": "UTC",
    "disabled": False,
    "overlap": Overlap.SKIP,
    "max_concurrent": 1,
    "catchup": {"policy": Catchup.LATEST, "window": timedelta(hours=1)},
    "timeout": timedelta(minutes=10),
    "retry": {
        "max_attempts": 1,
        "min_backoff": timedelta(seconds=1),
        "max_backoff": timedelta(minutes=5),
    },
    "fanout": {"count": 1, "spread": timedelta(0)},
    "throttle": None,
    "triggers": (),
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
    definition: dict
    """The normalized entry, JSON-ready: feeding it back to parse_job_entry gives it again."""
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
    acl: dict
    """{"readers": [...], "triggerers": [...], "owners": [...]}, every key present."""
    allowed_hosts: tuple[str, ...]
    throttles: dict[str, int]
    """Throttle name -> max_in_flight."""
    defaults: dict
    """The `defaults` block, normalized and JSON-ready (only the fields it sets)."""
    content_hash: str
    """sha256 hex of the file's bytes: an unchanged file needs no import."""

    @property
    def broken_job_ids(self) -> frozenset[str]:
        """Ids of entries skipped for an error: the importer keeps their older definitions."""
        return frozenset(error.job for error in self.job_errors if error.job)

    def job(self, job_id: str) -> JobConfig | None:
        return next((job for job in self.jobs if job.id == job_id), None)

    def settings(self) -> dict:
        """The project-wide settings, JSON-ready; parse_job_entry accepts this form too."""
        return {
            "acl": {role: list(members) for role, members in self.acl.items()},
            "allowed_hosts": list(self.allowed_hosts),
            "throttles": dict(self.throttles),
            "defaults": self.defaults,
        }
