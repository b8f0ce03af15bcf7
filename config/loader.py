"""Loading project configs: from a file, from text, one job entry from the API, and paths.

    load_project_file(path, backend)            one <configs>/<project>.yaml
    parse_project_text(project_id, text, ...)   the same from text (tests, POST /validate)
    parse_job_entry(entry, project, job_id)     one entry, e.g. a PUT body (JSON, no lines)
    validate_text(text, ...)                    every error of a document, for POST /validate
    validate_paths(paths, backend)              every error of files and directories (CLI)

Each raises or returns `ConfigError`s printed `FILE:LINE: message`. `backend` is "local"
(the embedded server: loopback and private targets allowed) or "cloud" (refused);
link-local targets and the metadata server are refused on both unless allowed_hosts
lists them (docs/REFERENCE.md section 6).

A directory given to validate_paths means its `*.yaml` files, which is what the server
imports; a file given by name is checked whatever its name, with an error if the server
would not import it under that name.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any, Collection, Mapping

from config.checks import Checker
from config.jobs import JobContext, entry_id, parse_defaults, parse_entry
from config.model import JOB_ID, ConfigError, JobConfig, ProjectConfig, ProjectConfigError
from config.targets import BACKENDS, TargetRules
from config.validate import validate_project
from config.yamlsource import LineMap, load_yaml
from statemachine.calendars import Calendar
from statemachine.safety import OwnService

__all__ = [
    "ConfigError", "JobConfig", "ProjectConfig", "ProjectConfigError", "expand_paths",
    "load_project_file", "parse_job_entry", "parse_project_text", "validate_paths",
    "validate_text",
]

SUFFIX = ".yaml"


def _require_backend(backend: str) -> None:
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {', '.join(BACKENDS)}, got {backend!r}")


def parse_project_text(project_id: str | None, text: str, filename: str,
                       backend: str = "local", *, path: str = "",
                       own: OwnService | None = None, content_hash: str | None = None) -> ProjectConfig:
    """The project `text` describes; ProjectConfigError if it fails as a whole.

    `project_id` None skips the project id check (POST /validate has no file name).
    content_hash is the sha256 of the text's UTF-8 bytes, unless the caller hashed the
    file's bytes already and gives that. `own` is the running server's service and chain
    queue (no cloud_tasks target may name them); None takes them from the environment.
    """
    if content_hash is None:
        content_hash = hashlib.sha256(text.encode("utf-8")).hexdigest()
    return _parse(project_id, text, filename, backend, path, content_hash, own)


def _parse(project_id: str | None, text: str, filename: str, backend: str, path: str,
           content_hash: str, own: OwnService | None = None) -> ProjectConfig:
    _require_backend(backend)
    document, lines = load_yaml(text, filename)
    return validate_project(project_id, document, lines, filename, path or filename,
                            content_hash, backend, own)


def load_project_file(path: str | Path, backend: str = "local") -> ProjectConfig:
    """One project file; the project id is its stem. ProjectConfigError on file failure."""
    filename = str(path)
    try:
        data = Path(path).read_bytes()
    except OSError as error:
        reason = error.strerror or str(error)
        raise ProjectConfigError([ConfigError(filename, 1, f"cannot read: {reason}")]) from None
    return _parse(Path(path).stem, decode_project_file(data, filename), filename, backend, filename,
                  hashlib.sha256(data).hexdigest())


def decode_project_file(data: bytes, filename: str) -> str:
    """A project file's text, decoded the one way both `validate` and the server do.

    :raises ProjectConfigError: the bytes are not UTF-8, at the line of the first bad byte.
    """
    try:
        return data.decode("utf-8-sig")  # editors on Windows add a byte-order mark
    except UnicodeDecodeError as error:
        line = data[: error.start].count(b"\n") + 1
        message = f"not UTF-8 text: byte 0x{data[error.start]:02x} cannot be decoded"
        raise ProjectConfigError([ConfigError(filename, line, message)]) from None


def parse_job_entry(entry: Any, project: ProjectConfig | Mapping[str, Any] | None, job_id: str,
                    filename: str = "<api>", *, known_jobs: Collection[str] | None = None,
                    backend: str = "local", lines: LineMap | None = None,
                    own: OwnService | None = None, project_id: str | None = None) -> JobConfig:
    """One job entry checked the way the project file's own entries are.

    entry: the entry as plain data (JSON or YAML values); it may omit `id` (the REST API
        takes the id from the URL) or repeat `job_id`.
    project: the project the job belongs to, for its defaults, throttles and
        allowed_hosts: a ProjectConfig, its `settings()` mapping (as stored), or None
        for none of them (then `throttle` names are not checked).
    known_jobs: the ids `triggers` may name (the caller knows the API-managed jobs);
        None does not check them. Cycles through other jobs are the caller's to check,
        with config.validate.trigger_cycle over the whole project.
    lines: where the entry's values are, when it came from YAML; without it every
        error is on line 0.
    own: the running server's service and chain queue; None reads the environment.
    project_id: the project's id, for the identities the operator granted it (`auth`);
        None checks no grant (delivery still does).

    Feeding a JobConfig's `definition.to_dict()` back in gives the same definition and
    revision, but for a fan-in job's (`after`), which only a project file defines.
    Raises ProjectConfigError with the entry's errors.
    """
    _require_backend(backend)
    lines = lines or LineMap(default=0)
    check = Checker(filename, lines, label=f"job '{job_id}': ", job=job_id)
    if not isinstance(job_id, str) or not JOB_ID.fullmatch(job_id):
        raise ProjectConfigError([ConfigError(filename, lines.default, (
            f"{job_id!r} is not a valid job id: use 1 to 100 letters, digits, '_', '.' "
            "or '-', not only dots"))])
    entry = check.attempt(lambda: check.mapping((), entry, "{schedule: ..., target: ...}"))
    if entry is not None and entry.get("id") is not None \
            and entry_id(check, (), entry) not in (None, job_id):
        check.report(("id",), f"'{entry['id']}' does not match the job id '{job_id}'")
    if entry is not None and entry.get("after") is not None:
        # Its upstream jobs learn whom to report to when their project file is imported.
        check.report(("after",), "a fan-in job (after) is defined in its project file, not through the API")
    if entry is None or check.errors:
        raise ProjectConfigError(check.errors)
    job = parse_entry(check, (), entry, job_id, _context(project, backend, known_jobs, own, project_id))
    if job is None:
        raise ProjectConfigError(check.errors)
    return job


def _context(project: ProjectConfig | Mapping[str, Any] | None, backend: str, known_jobs: Collection[str] | None,
             own: OwnService | None, project_id: str | None) -> JobContext:
    if project is None:
        return JobContext({}, TargetRules.of((), backend, own, project_id), None, known_jobs)
    settings = project.settings() if isinstance(project, ProjectConfig) else project
    check = Checker("<project settings>", LineMap())
    defaults = parse_defaults(check, ("defaults",), settings.get("defaults"))
    if check.errors:  # settings come from a validated project; this is a caller's bug
        raise ProjectConfigError(check.errors)
    return JobContext(defaults,
                      TargetRules.of(settings.get("allowed_hosts") or (), backend, own, project_id),
                      throttles=set(settings.get("throttles") or {}),
                      known_jobs=known_jobs,
                      calendars={name: Calendar.from_dict(data)
                                 for name, data in (settings.get("calendars") or {}).items()})


def validate_text(text: str, filename: str = "<request>", project_id: str | None = None,
                  backend: str = "local", own: OwnService | None = None) -> list[ConfigError]:
    """Every error of a project document, file-level and job-level, by line (`own` as
    for parse_project_text)."""
    try:
        return list(parse_project_text(project_id, text, filename, backend, own=own).job_errors)
    except ProjectConfigError as failure:
        return failure.errors


def expand_paths(paths: list[str]) -> tuple[list[str], list[ConfigError]]:
    """The files `paths` name (a directory: its *.yaml, sorted) and errors for missing ones."""
    files, errors = [], []
    for name in paths:
        path = Path(name)
        if path.is_dir():
            files += sorted(str(child) for child in path.glob("*" + SUFFIX) if child.is_file())
        elif path.exists():
            files.append(name)
        else:
            errors.append(ConfigError(name, 1, "no such file or directory"))
    return files, errors


def validate_paths(paths: list[str], backend: str = "local") -> list[ConfigError]:
    """Every error of every file `paths` name, file by file, each file's by line."""
    errors: list[ConfigError] = []
    for given in paths:  # in the order given, so a missing path's error sits in its place
        files, missing = expand_paths([given])
        errors += missing
        errors += _file_errors(files, backend)
    return errors


def _file_errors(files: list[str], backend: str) -> list[ConfigError]:
    errors: list[ConfigError] = []
    for name in files:
        if Path(name).suffix != SUFFIX:
            errors.append(ConfigError(name, 1, f"the server imports only <project>{SUFFIX} "
                                               "files; rename it"))
        try:
            errors += load_project_file(name, backend).job_errors
        except ProjectConfigError as failure:
            errors += failure.errors
    return errors
