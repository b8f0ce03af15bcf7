"""`jobs apply -f FILE` and `jobs delete`: API-managed jobs from files, as `kubectl apply`.

A file (YAML or JSON; `-` is standard input) holds job entries as a project file writes
them, each with its `id`: a project file's `jobs:` list, a list of entries, or one entry.
Each job is created or replaced as its own PUT would be, in batches of the API's
`jobs:batchPut` (`ApiClient.apply_jobs`); one the server refuses (a bad field, a job
the project's config file defines) is reported with the server's words and the others
are still applied; the exit status is then 1. A file that
cannot be read, or holds no entries, changes nothing and exits 2. Project-level fields
(`acl`, `defaults`, ...) belong to the project's config file, not the API: they are an
error here rather than silently ignored.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from cli.api_client import ApiClient, ApiFailure
from cli.common import Subparsers, UsageError
from cli.remote import Ids, Shown, add_verb, job_id, job_path
from config.model import ProjectConfigError
from config.yamlsource import load_yaml


def add_apply_and_delete(verbs: Subparsers) -> None:
    apply = add_verb(verbs, "apply", apply_jobs, "create or replace API-managed jobs from YAML or JSON files", (
        "  %(prog)s demo -f jobs.yaml\n"
        "  %(prog)s demo -f exporter.json -f reminders.yaml --output json\n"
        "  generate-jobs | %(prog)s demo -f -\n\n"
        "a file holds entries as a project file writes them, each with its id:\n"
        "  jobs:\n"
        "    - id: reminder-42\n"
        "      at: [\"2026-12-24T14:00:00Z\"]\n"
        "      target: {http: {url: https://hooks.example.com/remind}}"), ids=Ids.PROJECT)
    apply.add_argument("-f", "--filename", action="append", required=True, metavar="FILE",
                       help="a YAML or JSON file of job entries ('-': standard input); repeat it for several")
    delete = add_verb(verbs, "delete", delete_jobs, "delete API-managed jobs: they get no further occurrences, "
                      "and their history stays until retention removes it",
                      "  %(prog)s demo reminder-42\n  %(prog)s demo reminder-42 reminder-43 --missing-ok",
                      ids=Ids.PROJECT)
    delete.add_argument("jobs", metavar="JOB", nargs="+", type=job_id, help="the job ids")
    delete.add_argument("--missing-ok", action="store_true", help="a job that does not exist is no error")


def apply_jobs(client: ApiClient, args: argparse.Namespace) -> Shown:
    entries = [entry for path in args.filename for entry in read_entries(path)]
    _refuse_repeated_ids(entries)
    results = client.apply_jobs(args.project, entries)
    lines = [_result_line(args.project, result) for result in results]
    failed = any(result["status"] == "failed" for result in results)
    return Shown({"results": results}, "\n".join(lines), status=1 if failed else 0)


def _result_line(project: str, result: dict[str, Any]) -> str:
    error = result.get("error")
    if error:
        return f"{project}/{result['id']}: failed: {error['code']}: {error['message']}"
    return f"{project}/{result['id']}: {result['status']}"


def read_entries(path: str) -> list[dict[str, Any]]:
    """The job entries of one file, each with a string `id`; UsageError with FILE[:LINE]."""
    name = "<stdin>" if path == "-" else path
    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
    except OSError as error:
        raise UsageError(f"-f {path}: cannot read it: {error.strerror or error}") from None
    except UnicodeDecodeError:
        raise UsageError(f"-f {path}: not UTF-8 text") from None
    try:
        document, _ = load_yaml(text, name)
    except ProjectConfigError as failure:
        raise UsageError(str(failure.errors[0])) from None
    entries = _entries_of(document, name)
    for number, entry in enumerate(entries, 1):
        if not isinstance(entry, dict) or not isinstance(entry.get("id"), str) or not entry["id"]:
            raise UsageError(f"{name}: entry {number} is not a job entry with an id (a mapping with `id: NAME`)")
    return entries


def _entries_of(document: object, name: str) -> list[Any]:
    if isinstance(document, list):
        entries = document
    elif isinstance(document, dict) and "jobs" in document:
        others = sorted(set(document) - {"jobs"})
        if others:
            raise UsageError(f"{name}: {', '.join(others)}: project-level fields come from the project's config "
                             "file, not the API; apply holds jobs only")
        entries = document["jobs"] if isinstance(document["jobs"], list) else []
    elif isinstance(document, dict) and "id" in document:
        entries = [document]
    else:
        raise UsageError(f"{name}: expected job entries: a `jobs:` list, a list of entries, or one entry with an id")
    if not entries:
        raise UsageError(f"{name}: holds no job entries")
    return entries


def _refuse_repeated_ids(entries: list[dict[str, Any]]) -> None:
    seen: set[str] = set()
    for entry in entries:
        if entry["id"] in seen:
            raise UsageError(f"job {entry['id']} is given twice: which one should it be?")
        seen.add(entry["id"])


def delete_jobs(client: ApiClient, args: argparse.Namespace) -> Shown:
    results: list[dict[str, Any]] = []
    for job in args.jobs:
        path = job_path(argparse.Namespace(project=args.project, job=job))
        try:
            client.call("DELETE", path, {"allow_missing": "true" if args.missing_ok else None})
        except ApiFailure as failure:
            results.append({"id": job, "status": "failed", "error": {"code": failure.code,
                                                                      "message": failure.message}})
            continue
        results.append({"id": job, "status": "deleted"})
    failed = any(result["status"] == "failed" for result in results)
    lines = [_result_line(args.project, result) for result in results]
    return Shown({"results": results}, "\n".join(lines), status=1 if failed else 0)
