"""`jobs` and `invocations`: the operator's commands against a running server.

Each verb is one request of the REST API (docs/REFERENCE.md section 5; lists follow its pages),
shown as a table for people or, with --json, as the API's own JSON in one document.
An error answer is one line on stderr, `STATUS CODE: message` in the API's words, and
exit status 1; so is a server that cannot be reached. Bad arguments exit 2.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass
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
from cli.common import Subparsers, positive_int
from config.limits import MAX_PAGE_SIZE
from config.model import JOB_ID, PROJECT_ID
from statemachine.durations import parse_instant
from statemachine.vocabulary import InvocationStatus

PAGE_SIZE = MAX_PAGE_SIZE  # rows asked for per request when a list needs several
DEFAULT_JOB_LIMIT = 1000
DEFAULT_INVOCATION_LIMIT = 20

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


@dataclass(frozen=True)
class Shown:
    """What a verb shows: the API's JSON for --json, text for people, and a note for stderr."""

    document: object
    text: str
    note: str = ""


Verb = Callable[[ApiClient, argparse.Namespace], Shown]


def _id(pattern: re.Pattern[str], what: str, rule: str) -> Callable[[str], str]:
    def check(text: str) -> str:
        if not pattern.fullmatch(text):
            raise argparse.ArgumentTypeError(f"{text[:120]!r} is not a {what}: {rule}")
        return text
    return check


def _invocation_id(text: str) -> str:
    if not text.strip():
        raise argparse.ArgumentTypeError("an invocation id is not empty")
    return text


project_id = _id(PROJECT_ID, "project id", "lowercase letters, digits and '-', starting with a letter or digit")
job_id = _id(JOB_ID, "job id", "1 to 100 letters, digits, '_', '.' or '-', not only dots")


def _verb(verbs: Subparsers, name: str, run: Verb, summary: str, examples: str,
          job: bool = True) -> argparse.ArgumentParser:
    """One verb's parser: its positional ids, the connection options, --json, and help
    that ends with its examples and the environment."""
    parser = verbs.add_parser(name, help=summary, description=summary[0].upper() + summary[1:] + ".",
                              epilog=f"examples:\n{examples}\n\n{ENVIRONMENT}",
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("project", metavar="PROJECT", type=project_id, help="the project id (its config file's name)")
    if job:
        parser.add_argument("job", metavar="JOB", type=job_id, help="the job id")
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
    parser.add_argument("--json", action="store_true", help="print the API's JSON (one document) instead of text")
    parser.set_defaults(run=lambda args: _run(run, args), command_prog=parser.prog)
    return parser


def _run(verb: Verb, args: argparse.Namespace) -> int:
    server, token = server_url(args.server), bearer_token(args.token, token_file=args.token_file)
    refuse_plain_http(server, token, args.insecure)
    client = ApiClient(server, token)
    try:
        shown = verb(client, args)
    except (ApiFailure, Unreachable) as error:
        print(f"{args.command_prog}: {error}", file=sys.stderr)
        return 1
    print(json.dumps(shown.document, indent=2) if args.json else shown.text)
    if shown.note and not args.json:
        print(f"{args.command_prog}: {shown.note}", file=sys.stderr)
    return 0


def _group(subparsers: Subparsers, name: str, summary: str, description: str) -> Subparsers:
    """A command whose verbs follow it (`jobs list`): the verbs' subparsers."""
    group = subparsers.add_parser(name, help=summary, description=description, epilog=ENVIRONMENT,
                                  formatter_class=argparse.RawDescriptionHelpFormatter)
    return group.add_subparsers(dest="verb", metavar="VERB", required=True)


def _job_path(args: argparse.Namespace, action: str = "") -> str:
    return f"/projects/{segment(args.project)}/jobs/{segment(args.job)}{action}"


# --- jobs ------------------------------------------------------------------------------

def add_jobs(subparsers: Subparsers) -> None:
    verbs = _group(subparsers, "jobs",
                   "list, inspect, pause, resume, trigger, backfill or abort the jobs of a running server",
                   "Operate the jobs of a running Sundial server through its REST API.")
    listing = _verb(verbs, "list", list_jobs, "list a project's jobs, in id order", (
        "  %(prog)s demo\n  %(prog)s demo --json | jq -r '.jobs[].id'\n"
        "  %(prog)s demo --server https://sundial.example.com --token-file ~/.config/sundial/token\n"
        "  pass show sundial | %(prog)s demo --server https://sundial.example.com --token -"), job=False)
    listing.add_argument("--limit", type=positive_int, default=DEFAULT_JOB_LIMIT, metavar="N",
                         help=f"show at most N jobs, reading as many pages as that takes (default {DEFAULT_JOB_LIMIT})")
    _verb(verbs, "get", get_job, "show one job: its state, schedule, next run and last invocation",
          "  %(prog)s demo heartbeat\n  %(prog)s demo heartbeat --json")
    pause = _verb(verbs, "pause", pause_job, "pause a job: nothing is delivered until it is resumed",
                  "  %(prog)s demo heartbeat --reason 'INC-1234: target down'")
    pause.add_argument("--reason", help="why, shown beside the paused job")
    _verb(verbs, "resume", resume_job, "resume a paused job from its next occurrence",
          "  %(prog)s demo heartbeat")
    trigger = _verb(verbs, "trigger", trigger_job, "start an invocation of a job now (its overlap policy applies)",
                    "  %(prog)s demo heartbeat\n"
                    "  %(prog)s demo heartbeat --request-id deploy-42")
    trigger.add_argument("--request-id", metavar="ID",
                         help="idempotency key: the same id again returns the first invocation instead of a new one")
    trigger.add_argument("--scheduled-time", metavar="TIME", type=_instant,
                         help="re-run the occurrence of this past time (RFC 3339 with an offset or Z): "
                              "its scheduled time and template values")
    backfill = _verb(verbs, "backfill", backfill_job, "run each fire time of a job's schedule in a past range "
                     "[--start, --end), one after another", (
                         "  %(prog)s demo exporter --start 2026-11-24T00:00:00Z --end 2026-11-25T00:00:00Z\n"
                         "  %(prog)s demo exporter --start 2026-11-24T00:00:00+01:00 --end 2026-11-24T06:00:00+01:00 "
                         "--request-id inc-7"))
    backfill.add_argument("--start", metavar="TIME", type=_instant, required=True,
                          help="the first instant of the range, included (RFC 3339 with an offset or Z)")
    backfill.add_argument("--end", metavar="TIME", type=_instant, required=True,
                          help="the end of the range, excluded; not in the future")
    backfill.add_argument("--request-id", metavar="ID",
                          help="idempotency key: the same id again names the same invocations, starts nothing new")
    abort = _verb(verbs, "abort", abort_job, "abort a job's active invocations (they end ABORTED)",
                  "  %(prog)s demo heartbeat --reason 'runaway export'")
    abort.add_argument("--reason", help="why, recorded with the aborted invocations")


def list_jobs(client: ApiClient, args: argparse.Namespace) -> Shown:
    jobs: list[dict[str, Any]] = []
    token = None
    for page in client.pages(f"/projects/{segment(args.project)}/jobs", "jobs", args.limit, PAGE_SIZE):
        jobs += page["jobs"]
        token = page.get("next_page_token")
    note = f"more jobs than --limit {args.limit}; raise it to see them" if token else ""
    text = tables.table(tables.JOB_COLUMNS, map(tables.job_row, jobs)) if jobs else f"no jobs in {args.project}"
    return Shown({"jobs": jobs, "next_page_token": token}, text, note)


def get_job(client: ApiClient, args: argparse.Namespace) -> Shown:
    job = client.call("GET", _job_path(args))
    return Shown(job, tables.job_fields(job))


def _job_line(verb: str, job: dict[str, Any]) -> str:
    state = job["state"] + (f" ({job['pause_reason']})" if job.get("paused") and job.get("pause_reason") else "")
    active = ", ".join(job.get("active_invocations") or []) or "none"
    return (f"{verb} {job['project']}/{job['id']}: state {state}, next run {tables.when(job.get('next_run_time'))}, "
            f"active invocations: {active}")


def pause_job(client: ApiClient, args: argparse.Namespace) -> Shown:
    body = {"reason": args.reason} if args.reason else None
    job = client.call("POST", _job_path(args, ":pause"), body=body)
    return Shown(job, _job_line("paused", job))


def resume_job(client: ApiClient, args: argparse.Namespace) -> Shown:
    job = client.call("POST", _job_path(args, ":resume"))
    return Shown(job, _job_line("resumed", job))


def abort_job(client: ApiClient, args: argparse.Namespace) -> Shown:
    body = {"reason": args.reason} if args.reason else None
    job = client.call("POST", _job_path(args, ":abort"), body=body)
    return Shown(job, _job_line("aborted the active invocations of", job))


def trigger_job(client: ApiClient, args: argparse.Namespace) -> Shown:
    body = {"request_id": args.request_id} if args.request_id else {}
    if args.scheduled_time:
        body["scheduled_time"] = args.scheduled_time
    invocation = client.call("POST", _job_path(args, ":trigger"), body=body or None)
    return Shown(invocation, f"triggered {args.project}/{args.job}: invocation {invocation['id']} "
                             f"{tables.outcome(invocation)}")


def backfill_job(client: ApiClient, args: argparse.Namespace) -> Shown:
    body = {"start": args.start, "end": args.end}
    if args.request_id:
        body["request_id"] = args.request_id
    answer = client.call("POST", _job_path(args, ":backfill"), body=body)
    lines = [f"backfilled {args.project}/{args.job}: {answer['count']:,} invocations, started in order"]
    return Shown(answer, "\n".join(lines + list(answer["invocations"])))


def _instant(text: str) -> str:
    """An RFC 3339 time, checked here and sent as written."""
    try:
        parse_instant(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    return text


# --- invocations -------------------------------------------------------------------------

def add_invocations(subparsers: Subparsers) -> None:
    verbs = _group(subparsers, "invocations", "list or inspect a job's invocations on a running server",
                   "Read a job's invocation history from a running Sundial server, newest first.")
    listing = _verb(verbs, "list", list_invocations, "list a job's invocations, newest first", (
        "  %(prog)s demo heartbeat\n"
        "  %(prog)s demo heartbeat --status FAILED --limit 5\n"
        "  %(prog)s demo heartbeat --json | jq '.invocations[0]'"))
    listing.add_argument("--status", choices=[status.value for status in InvocationStatus], type=str.upper,
                         help="only invocations with this status; the history is read newest first until "
                              "--limit of them are found or it ends")
    listing.add_argument("--limit", type=positive_int, default=DEFAULT_INVOCATION_LIMIT, metavar="N",
                         help=f"show at most N invocations (default {DEFAULT_INVOCATION_LIMIT})")
    get = _verb(verbs, "get", get_invocation, "show one invocation with its log",
                "  %(prog)s demo heartbeat 20261125T120000Z-3f9c\n"
                "  %(prog)s demo heartbeat 20261125T120000Z-3f9c --json")
    get.add_argument("invocation", metavar="INVOCATION", type=_invocation_id,
                     help="the invocation id (see `invocations list`)")


def list_invocations(client: ApiClient, args: argparse.Namespace) -> Shown:
    """Without --status, exactly --limit rows are asked for; with it, whole pages are
    read and filtered here (the API has no status filter), and next_page_token is the
    one after the last page read."""
    path = _job_path(args, "/invocations")
    rows: list[dict[str, Any]] = []
    token = None
    wanted = sys.maxsize if args.status else args.limit
    for page in client.pages(path, "invocations", wanted, PAGE_SIZE):
        rows += [row for row in page["invocations"] if not args.status or row["status"] == args.status]
        token = page.get("next_page_token")
        if len(rows) >= args.limit:
            break
    rows = rows[:args.limit]
    what = f"{args.status} invocations" if args.status else "invocations"
    text = (tables.table(tables.INVOCATION_COLUMNS, map(tables.invocation_row, rows)) if rows
            else f"no {what} of {args.project}/{args.job}")
    note = f"more {what} than --limit {args.limit}; raise it to see them" if token and len(rows) >= args.limit else ""
    return Shown({"invocations": rows, "next_page_token": token}, text, note)


def get_invocation(client: ApiClient, args: argparse.Namespace) -> Shown:
    invocation = client.call("GET", _job_path(args, f"/invocations/{segment(args.invocation)}"))
    return Shown(invocation, tables.invocation_fields(invocation))
