"""What every command against a running server shares: its parser (the ids it names, the
connection options, `--output`), and how a verb's result or error is shown.

A verb is one function `(client, args) -> Shown`: the document `--output json` prints (the
API's own JSON where one request answers it) and the text people read. An error answer
is one line on stderr, `STATUS CODE: message` in the API's words, and exit status 1; so
is a server that cannot be reached. Bad arguments exit 2.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass
from enum import Enum
from typing import Any, Callable

import cli.tables as tables
from cli.api_client import (
    DEFAULT_SERVER,
    ApiClient,
    ApiFailure,
    Unreachable,
    bearer_token,
    refuse_plain_http,
    segment,
    server_url,
)
from cli.common import Subparsers
from config.job_extras import LABEL_KEY
from config.model import JOB_ID, PROJECT_ID

ENVIRONMENT = f"""\
environment:
  SUNDIAL_SERVER   the server's URL when --server is not given (default {DEFAULT_SERVER})
  SUNDIAL_TOKEN    the bearer token when neither --token-file nor --token is given: one of
                   the server's SUNDIAL_API_TOKENS. A server started without tokens listens
                   on loopback only and needs none; one with tokens answers 401 without a
                   valid one. A token is sent over plain http:// only to this machine
                   (127.0.0.1, localhost, [::1]); elsewhere use https:// (or --insecure).

Exit status 0 on success; 1 when the server answers an error (printed as one line:
the HTTP status, the API's error code and message) or cannot be reached; 2 for a bad
argument.
"""

OUTPUTS = ("text", "json")


@dataclass(frozen=True)
class Shown:
    """What a verb shows: the JSON for --output json, text for people, a note for stderr,
    and the exit status (1 when the request went through but some part of it failed)."""

    document: object
    text: str
    note: str = ""
    status: int = 0
    streamed: bool = False  # the verb printed as it went (`invocations follow`)


Verb = Callable[[ApiClient, argparse.Namespace], Shown]


class Ids(Enum):
    """Which ids a verb's command line names before its options."""

    NONE = "none"
    PROJECT = "project"
    PROJECT_AND_JOB = "project and job"
    PROJECT_AND_MAYBE_JOB = "project and maybe a job"


def _id(pattern: re.Pattern[str], what: str, rule: str) -> Callable[[str], str]:
    def check(text: str) -> str:
        if not pattern.fullmatch(text):
            raise argparse.ArgumentTypeError(f"{text[:120]!r} is not a {what}: {rule}")
        return text
    return check


project_id = _id(PROJECT_ID, "project id", "lowercase letters, digits and '-', starting with a letter or digit")
job_id = _id(JOB_ID, "job id", "1 to 100 letters, digits, '_', '.' or '-', not only dots")


def add_verb(verbs: Subparsers, name: str, run: Verb, summary: str, examples: str,
             ids: Ids = Ids.PROJECT_AND_JOB) -> argparse.ArgumentParser:
    """One verb's parser: its positional ids, the connection options, --output, and help
    that ends with its examples and the environment."""
    parser = verbs.add_parser(name, help=summary, description=summary[0].upper() + summary[1:] + ".",
                              epilog=f"examples:\n{examples}\n\n{ENVIRONMENT}",
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    if ids is not Ids.NONE:
        parser.add_argument("project", metavar="PROJECT", type=project_id,
                            help="the project id (its config file's name)")
    if ids is Ids.PROJECT_AND_JOB:
        parser.add_argument("job", metavar="JOB", type=job_id, help="the job id")
    elif ids is Ids.PROJECT_AND_MAYBE_JOB:
        parser.add_argument("job", metavar="JOB", type=job_id, nargs="?", help="the job id")
    _connection_options(parser)
    parser.set_defaults(run=lambda args: run_verb(run, args), command_prog=parser.prog)
    return parser


def _connection_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--server", metavar="URL",
                        help=f"the Sundial server (SUNDIAL_SERVER, default {DEFAULT_SERVER})")
    parser.add_argument("--token-file", metavar="FILE",
                        help="read the bearer token from FILE ('-': standard input)")
    parser.add_argument("--token", metavar="TOKEN",
                        help="the bearer token ('-': read it from standard input); on the command "
                             "line itself, every local user sees it in the process list: prefer "
                             "--token-file or SUNDIAL_TOKEN")
    parser.add_argument("--insecure", action="store_true",
                        help="send the token over plain http:// to a host other than this machine")
    parser.add_argument("-o", "--output", choices=OUTPUTS, default="text",
                        help="text for people (the default), or json: the API's JSON as one document")
    parser.add_argument("--json", dest="output", action="store_const", const="json",
                        help="the same as --output json")


def connect(args: argparse.Namespace) -> ApiClient:
    """The client the connection options name; raises UsageError for a bad one."""
    server, token = server_url(args.server), bearer_token(args.token, token_file=args.token_file)
    refuse_plain_http(server, token, args.insecure)
    return ApiClient(server, token)


def run_verb(verb: Verb, args: argparse.Namespace) -> int:
    client = connect(args)
    try:
        shown = verb(client, args)
    except (ApiFailure, Unreachable) as error:
        print(f"{args.command_prog}: {error}", file=sys.stderr)
        return 1
    if not shown.streamed:
        print(json.dumps(shown.document, indent=2) if args.output == "json" else shown.text)
    if shown.note and args.output != "json":
        print(f"{args.command_prog}: {shown.note}", file=sys.stderr)
    return shown.status


def add_group(subparsers: Subparsers, name: str, summary: str, description: str) -> Subparsers:
    """A command whose verbs follow it (`jobs list`): the verbs' subparsers."""
    group = subparsers.add_parser(name, help=summary, description=description, epilog=ENVIRONMENT,
                                  formatter_class=argparse.RawDescriptionHelpFormatter)
    return group.add_subparsers(dest="verb", metavar="VERB", required=True)


def job_path(args: argparse.Namespace, action: str = "") -> str:
    return f"/projects/{segment(args.project)}/jobs/{segment(args.job)}{action}"


def label_selector(text: str) -> str:
    """--label KEY=VALUE, KEY:VALUE or KEY, as the API reads it (web/labels.py)."""
    key = re.split(r"[:=]", text, maxsplit=1)[0]
    if not LABEL_KEY.fullmatch(key):
        raise argparse.ArgumentTypeError(f"{text[:120]!r}: write KEY=VALUE or KEY, the key matching "
                                         "^[a-z][a-z0-9_-]{0,62}$")
    return text


def to_api_selector(text: str) -> str:
    """KEY=VALUE as `label=KEY:VALUE`, the spelling every server release reads."""
    key, _, value = text.partition(_first_separator(text))
    return f"{key}:{value}" if value or text != key else key


def _first_separator(text: str) -> str:
    found = [(text.find(mark), mark) for mark in ":=" if mark in text]
    return min(found)[1] if found else ":"


def job_line(verb: str, job: dict[str, Any]) -> str:
    state = job["state"] + (f" ({job['pause_reason']})" if job.get("paused") and job.get("pause_reason") else "")
    active = ", ".join(job.get("active_invocations") or []) or "none"
    return (f"{verb} {job['project']}/{job['id']}: state {state}, next run {tables.when(job.get('next_run_time'))}, "
            f"active invocations: {active}")
