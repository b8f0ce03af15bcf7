"""`projects list`: the projects the caller may read, with their job counts and config errors."""

from __future__ import annotations

import argparse

import cli.tables as tables
from cli.api_client import ApiClient
from cli.common import Subparsers
from cli.remote import Ids, Shown, add_group, add_verb

COLUMNS = ("ID", "JOBS", "CONFIG")


def add_projects(subparsers: Subparsers) -> None:
    verbs = add_group(subparsers, "projects", "list the projects of a running server",
                      "The projects of a running Sundial server that the caller may read.")
    add_verb(verbs, "list", list_projects, "list the projects the caller may read, with their job counts and "
             "whether their config files load",
             "  %(prog)s\n  %(prog)s --output json | jq -r '.projects[].id'", ids=Ids.NONE)


def list_projects(client: ApiClient, args: argparse.Namespace) -> Shown:
    answer = client.call("GET", "/projects")
    projects = answer["projects"]
    if not projects:
        return Shown(answer, "no projects (or none this caller may read)")
    return Shown(answer, tables.table(COLUMNS, (
        [project["id"], str(project["job_count"]), _config(project)] for project in projects)))


def _config(project: dict[str, object]) -> str:
    """`ok`, the file's error, or how many of its jobs are broken."""
    if project.get("config_error"):
        return f"error: {' '.join(str(project['config_error']).split())}"
    broken = project.get("job_errors") or []
    return f"{len(broken)} job errors" if isinstance(broken, list) and broken else "ok"
