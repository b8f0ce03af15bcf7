"""`validate`: check project config files the way the server will import them."""

from __future__ import annotations

import argparse
import json
import sys

from cli.common import Subparsers, UsageError, add_output
from config.loader import expand_paths, validate_paths
from config.settings import variable
from config.targets import BACKENDS

_EPILOG = """\
A directory means the *.yaml files in it, as the server reads them. Each error is
printed on stdout as FILE:LINE: message; exit status 0 when every file is valid,
1 otherwise. A job with an error is skipped by the server while the project's other
jobs load; an error in a top-level field makes the server ignore the whole file.
The file format is described in README.md.

Environment:
  SUNDIAL_BACKEND        local or cloud: which target address rules apply (--backend wins)
  SUNDIAL_SERVICE_URL, GOOGLE_CLOUD_PROJECT, GAE_APPLICATION, SUNDIAL_TASKS_QUEUE,
  SUNDIAL_OWN_HOSTS, K_SERVICE
                         Sundial's own service (its URL, other host names, Cloud Run
                         service) and chain queue, which no cloud_tasks target may name
  SUNDIAL_IDENTITIES, SUNDIAL_IDENTITY_AUDIENCES, SUNDIAL_TASKS_SERVICE_ACCOUNT,
  SUNDIAL_ID_TOKEN_AUDIENCE
                         the service accounts (and OIDC audiences) the operator grants
                         each project's `auth`; Sundial's own accounts and audiences

Examples:
  main.py validate examples/configs
  main.py validate billing.yaml --backend cloud
"""


def add_validate(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "validate",
        help="check project config files",
        description="Check project config files the way the server imports them, without a server.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("paths", nargs="+", metavar="PATH",
                        help="a <project>.yaml file, or a directory of them")
    parser.add_argument(
        "--backend", choices=BACKENDS, default=None,
        help="apply the target address rules of this backend "
             "(default $SUNDIAL_BACKEND, else local)",
    )
    add_output(parser, '{"errors": [{"file", "line", "message"}], "files"}, on stdout whatever the outcome')
    parser.set_defaults(run=run_validate)


def run_validate(args: argparse.Namespace) -> int:
    backend = args.backend or variable("SUNDIAL_BACKEND") or "local"
    if backend not in BACKENDS:
        raise UsageError(f"SUNDIAL_BACKEND: expected one of {', '.join(BACKENDS)}, "
                         f"got {backend!r}")
    errors = validate_paths(args.paths, backend)
    files, _ = expand_paths(args.paths)
    if args.output == "json":
        print(json.dumps({"errors": [{"file": error.file, "line": error.line, "message": error.message}
                                     for error in errors], "files": len(files)}))
    for error in errors if args.output == "text" else []:
        print(error)
    checked = f"{len(files)} file{'s' if len(files) != 1 else ''}"
    if errors:
        print(f"validate: {len(errors)} error{'s' if len(errors) != 1 else ''} "
              f"({checked} checked)", file=sys.stderr)
        return 1
    print(f"validate: {checked} valid", file=sys.stderr)
    return 0
