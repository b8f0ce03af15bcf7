"""Read a configs directory and import each project file that changed."""

from __future__ import annotations

import hashlib
import logging
import os
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from app.file_signatures import FileSignatures
from app.parse_ahead import ParseAhead
from config.loader import ProjectConfigError, decode_project_file, parse_project_text
from config.model import PROJECT_ID, ConfigError
from engine.collector import collector_paused
from engine.config_import import ConfigImport, JobSnapshot, ProjectSnapshot
from engine.logs import log_event
from statemachine.safety import OwnService

log = logging.getLogger("sundial.config")


def directory_import(configs: ConfigImport, directory: str | Path, backend: str = "local",
                     own: OwnService | None = None, after: Callable[[], object] | None = None) -> Callable[[], int]:
    """What `serve` runs every import period (and App Engine's cron every minute):
    `import_directory` with the files' signatures kept from one look to the next, then `after`."""
    seen = FileSignatures()

    def run() -> int:
        parsed = import_directory(configs, directory, backend, own, seen)
        if after is not None:
            after()
        return parsed

    return run


def import_directory(configs: ConfigImport, directory: str | Path, backend: str = "local",
                     own: OwnService | None = None, seen: FileSignatures | None = None) -> int:
    """Import every `<project>.yaml`; a project whose file is gone is removed.

    `seen`: the files' signatures as the last looks found them (kept by the caller
    from one look to the next), so that a file whose stat has not changed is not read
    and hashed again (app/file_signatures.py); None reads every file.

    Returns how many project files were read and parsed (unchanged files are not).
    """
    seen = seen if seen is not None else FileSignatures()
    files = _project_files(Path(directory))
    if files is None:
        return 0
    # One read of the store for the whole look: the hash of the file each project has.
    stored = configs.project_hashes()
    reads = []
    for project, path in files.items():
        if not PROJECT_ID.fullmatch(project):
            log_event(log, "config file ignored", file=str(path),
                      error="a project id must match ^[a-z0-9][a-z0-9-]{0,62}$")
            continue
        read = _read_file(project, path, seen, stored.get(project), own)
        if read is not None:
            reads.append(read)
    changed = [read for read in reads if read.digest != read.stored]
    # Only the embedded server parses ahead: an App Engine instance may have one core
    # and too little memory for a second interpreter. The collector waits while files
    # are parsed and applied (engine/collector.py); an unchanged directory pauses nothing.
    with collector_paused() if changed else nullcontext(), \
            ParseAhead(snapshot_of, [(read.project, read.path, read.data, read.digest, backend, own)
                                     for read in changed], allowed=backend == "local") as ahead:
        parsed = 0
        for read in reads:
            seen.forget(read.project)  # until the store has this digest
            if read.digest != read.stored:
                configs.import_project(ahead.result(parsed))
                parsed += 1
            seen.remember(read.project, read.stat, read.digest, read.read_at)
    for project in stored:
        if project not in files:
            seen.forget(project)
            configs.remove_project(project)
    return parsed


def _project_files(directory: Path) -> dict[str, Path] | None:
    """`{stem: path}` of the directory's *.yaml files; None when it cannot be listed.

    A missing or unreadable directory is a mistake or a moment (a deploy, a remount, a
    permission change), never an order to remove every project, so it changes nothing.
    """
    try:
        with os.scandir(directory) as entries:
            names = sorted(entry.name for entry in entries if entry.name.endswith(".yaml"))
    except FileNotFoundError:
        log_event(log, "config directory missing", directory=str(directory))
        return None
    except OSError as error:  # permission denied, not a directory, an I/O error
        log_event(log, "config directory unreadable", level=logging.ERROR, directory=str(directory),
                  error=error.strerror or str(error), effect="nothing changed; every job keeps running")
        return None
    return {name[: -len(".yaml")]: directory / name for name in names}


@dataclass
class _Read:
    project: str
    path: Path
    stat: os.stat_result
    data: bytes
    digest: str
    read_at: float
    stored: str | None  # the hash of the file the project has; None for a new project


def _read_file(project: str, path: Path, seen: FileSignatures, stored: str | None,
               own: OwnService | None) -> _Read | None:
    """The file's bytes unless the store has its content already (by its signature)."""
    read_at = seen.now()
    try:
        stat = path.stat()
        # The store has the last word: a project row changed since (or gone) is read again.
        if stored is not None and seen.digest(project, stat) == stored:
            return None
        data = path.read_bytes()
    except OSError as error:  # removed or unreadable between listing and reading
        log_event(log, "config file unreadable", level=logging.ERROR, file=str(path), error=str(error))
        return None
    return _Read(project, path, stat, data, file_digest(project, data, own), read_at, stored)


def file_digest(project: str, data: bytes, own: OwnService | None) -> str:
    """The file's hash, with what its validation depends on beyond the file: the grant of
    identities and Sundial's own names (OwnService.fingerprint). A file checked under a
    grant that has since changed is checked again, so a job naming an account no longer
    granted shows its error as any broken entry does. (What a project's row stores as its
    config hash; bench/server_process.py waits for it.)"""
    if own is None:
        return hashlib.sha256(data).hexdigest()
    return hashlib.sha256(data + b"\0" + own.fingerprint(project).encode("utf-8")).hexdigest()


def snapshot_of(project: str, path: Path, data: bytes, digest: str, backend: str,
                own: OwnService | None = None) -> ProjectSnapshot:
    # Errors name the file, not the directory: every reader of the project sees them,
    # and where the server keeps its files is the operator's business.
    try:
        text = decode_project_file(data, path.name)  # exactly as `main.py validate` reads it
        config = parse_project_text(project, text, path.name, backend=backend, own=own, content_hash=digest)
    except ProjectConfigError as error:
        return ProjectSnapshot(project, digest, error="\n".join(str(e) for e in error.errors))
    return ProjectSnapshot(
        project=project,
        content_hash=digest,
        jobs=tuple(JobSnapshot(j.id, j.policy, j.definition, j.disabled) for j in config.jobs),
        job_errors=tuple(str(e) for e in config.job_errors),
        broken_jobs=broken_jobs(config.job_errors),
        settings=config.settings(),
    )


def broken_jobs(job_errors: tuple[ConfigError, ...]) -> dict[str, str]:
    """`{job id: its entry's errors}`, each error as `job_errors` shows it, in file order."""
    found: dict[str, list[str]] = {}
    for error in job_errors:
        if error.job:
            found.setdefault(error.job, []).append(str(error))
    return {job: "\n".join(errors) for job, errors in found.items()}
