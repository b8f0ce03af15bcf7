"""`jobs` and `invocations`: the operator's commands against a running server.

Each verb is one request of the REST API (docs/REFERENCE.md section 5; lists follow its
pages), shown as a table for people or, with --output json, as the API's own JSON in one
document (cli/remote.py). `jobs apply` and `jobs delete` are in cli/lifecycle.py,
`invocations follow` in cli/follow.py, the bulk forms of pause and resume in cli/bulk.py.\n"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import cli.bulk as bulk
import cli.follow as follow
import cli.lifecycle as lifecycle
import cli.tables as tables
from cli.api_client import ApiClient, segment
from cli.common import Subparsers, positive_int
from cli.remote import Ids, Shown, add_group, add_verb, job_line, job_path, label_selector, to_api_selector
from config.limits import MAX_PAGE_SIZE
from statemachine.durations import parse_instant
from statemachine.record import JobState
from statemachine.vocabulary import TERMINAL_STATUSES, InvocationStatus

PAGE_SIZE = MAX_PAGE_SIZE  # rows asked for per request when a list needs several
DEFAULT_JOB_LIMIT = 1000
DEFAULT_INVOCATION_LIMIT = 20

# --- jobs ------------------------------------------------------------------------------

def add_jobs(subparsers: Subparsers) -> None:
    verbs = add_group(subparsers, "jobs",
                      "list, inspect, apply, delete, pause, resume, trigger, backfill or abort the jobs "
                      "of a running server",
                      "Operate the jobs of a running Sundial server through its REST API.")
    _add_reading(verbs)
    lifecycle.add_apply_and_delete(verbs)
    _add_pause_and_resume(verbs)
    _add_runs(verbs)


def _add_reading(verbs: Subparsers) -> None:
    listing = add_verb(verbs, "list", list_jobs, "list a project's jobs, in id order", (
        "  %(prog)s demo\n  %(prog)s demo --label team=data --state paused\n"
        "  %(prog)s demo --output json | jq -r '.jobs[].id'\n"
        "  %(prog)s demo --server https://sundial.example.com --token-file ~/.config/sundial/token\n"
        "  pass show sundial | %(prog)s demo --server https://sundial.example.com --token -"), ids=Ids.PROJECT)
    listing.add_argument("--limit", type=positive_int, default=DEFAULT_JOB_LIMIT, metavar="N",
                         help=f"show at most N jobs, reading as many pages as that takes (default {DEFAULT_JOB_LIMIT})")
    listing.add_argument("--label", action="append", default=[], metavar="KEY=VALUE", type=label_selector,
                         help="only jobs with this label (KEY alone: any value); repeat it for several, all must match")
    listing.add_argument("--state", choices=[state.value for state in JobState], type=str.upper,
                         help="only jobs in this state (as of the read: a job whose next occurrence is "
                              "made ready ahead of its time is SCHEDULED until then)")
    add_verb(verbs, "get", get_job, "show one job: its state, schedule, next run and last run",
             "  %(prog)s demo heartbeat\n  %(prog)s demo heartbeat --output json")


def _add_pause_and_resume(verbs: Subparsers) -> None:
    pause = add_verb(verbs, "pause", bulk.pause_jobs, "pause a job, or every job of a project or with a label: "
                     "nothing is delivered until it is resumed", (
                         "  %(prog)s demo heartbeat --reason 'INC-1234: target down'\n"
                         "  %(prog)s demo --label team=data --reason 'INC-1235: warehouse maintenance'\n"
                         "  %(prog)s demo --all --reason 'change freeze'"), ids=Ids.PROJECT_AND_MAYBE_JOB)
    pause.add_argument("--reason", help="why, shown beside each paused job and in the audit log")
    resume = add_verb(verbs, "resume", bulk.resume_jobs, "resume a paused job, or the paused jobs of a project or "
                      "with a label, from their next occurrence", (
                          "  %(prog)s demo heartbeat\n  %(prog)s demo --label team=data --reason 'INC-1235 over'"),
                      ids=Ids.PROJECT_AND_MAYBE_JOB)
    resume.add_argument("--reason", help="bulk only: why, recorded in the audit log")
    for parser in (pause, resume):
        bulk.add_selection(parser)


def _add_runs(verbs: Subparsers) -> None:
    trigger = add_verb(verbs, "trigger", trigger_job, "start an invocation of a job now (its overlap policy applies)",
                       "  %(prog)s demo heartbeat\n"
                       "  %(prog)s demo heartbeat --request-id deploy-42")
    trigger.add_argument("--request-id", metavar="ID",
                         help="idempotency key: the same id again returns the first invocation instead of a new one")
    trigger.add_argument("--scheduled-time", metavar="TIME", type=_instant,
                         help="re-run the occurrence of this past time (RFC 3339 with an offset or Z): "
                              "its scheduled time and template values")
    backfill = add_verb(verbs, "backfill", backfill_job, "run each fire time of a job's schedule in a past range "
                        "[--start, --end), one after another", (
                            "  %(prog)s demo exporter --start 2026-11-24T00:00:00Z --end 2026-11-25T00:00:00Z\n"
                            "  %(prog)s demo exporter --start 2026-11-24T00:00:00+01:00 "
                            "--end 2026-11-24T06:00:00+01:00 --request-id inc-7"))
    backfill.add_argument("--start", metavar="TIME", type=_instant, required=True,
                          help="the first instant of the range, included (RFC 3339 with an offset or Z)")
    backfill.add_argument("--end", metavar="TIME", type=_instant, required=True,
                          help="the end of the range, excluded; not in the future")
    backfill.add_argument("--request-id", metavar="ID",
                          help="idempotency key: the same id again names the same invocations, starts nothing new")
    abort = add_verb(verbs, "abort", abort_job, "abort a job's active invocations (they end ABORTED)",
                     "  %(prog)s demo heartbeat --reason 'runaway export'")
    abort.add_argument("--reason", help="why, recorded with the aborted invocations")


def list_jobs(client: ApiClient, args: argparse.Namespace) -> Shown:
    """Without --state, --limit jobs are asked for; with it, whole pages are read and
    filtered here (the API filters by label only)."""
    jobs: list[dict[str, Any]] = []
    token = None
    wanted = sys.maxsize if args.state else args.limit
    query = {"label": [to_api_selector(label) for label in args.label]} if args.label else None
    for page in client.pages(f"/projects/{segment(args.project)}/jobs", "jobs", wanted, PAGE_SIZE, query):
        jobs += [job for job in page["jobs"] if not args.state or job["state"] == args.state]
        token = page.get("next_page_token")
        if len(jobs) >= args.limit:
            break
    jobs = jobs[:args.limit]
    note = f"more jobs than --limit {args.limit}; raise it to see them" if token and len(jobs) >= args.limit else ""
    if not jobs or args.output == "json":  # (the JSON is the API's: no last runs to look up)
        return Shown({"jobs": jobs, "next_page_token": token}, f"no {_which(args)}jobs in {args.project}", note)
    runs = last_runs(client, args.project, jobs)
    rows = (tables.job_row(job, runs[job["id"]]) for job in jobs)
    return Shown({"jobs": jobs, "next_page_token": token}, tables.table(tables.JOB_COLUMNS, rows), note)


def _which(args: argparse.Namespace) -> str:
    return "".join(f"{word} " for word in [args.state or "", *args.label] if word)


def get_job(client: ApiClient, args: argparse.Namespace) -> Shown:
    job = client.call("GET", job_path(args))
    return Shown(job, tables.job_fields(job, last_runs(client, args.project, [job])[job["id"]]))


# An invocation committed ahead of its time (STARTING, nothing sent, no started_time) is the
# job's next run, not its last: the API lists it from its commit, up to 10 s early.
_ENDED = {status.value for status in TERMINAL_STATUSES}
RECENT = 10  # invocations read to find the last that ran, for a job whose newest has not


def has_run(invocation: dict[str, Any]) -> bool:
    return invocation.get("started_time") is not None or invocation.get("status") in _ENDED


def last_runs(client: ApiClient, project: str, jobs: list[dict[str, Any]]) -> dict[str, dict[str, Any] | None]:
    """Each job's last invocation that has run (started or ended); for the few whose newest
    has not, one more request each reads their recent history."""
    runs: dict[str, dict[str, Any] | None] = {}
    for job in jobs:
        last = job.get("last_invocation")
        if last is None or has_run(last):
            runs[job["id"]] = last
            continue
        page = client.call("GET", f"/projects/{segment(project)}/jobs/{segment(job['id'])}/invocations",
                           {"page_size": RECENT})
        runs[job["id"]] = next((row for row in page["invocations"] if has_run(row)), None)
    return runs


def abort_job(client: ApiClient, args: argparse.Namespace) -> Shown:
    body = {"reason": args.reason} if args.reason else None
    job = client.call("POST", job_path(args, ":abort"), body=body)
    return Shown(job, job_line("aborted the active invocations of", job))


def trigger_job(client: ApiClient, args: argparse.Namespace) -> Shown:
    body = {"request_id": args.request_id} if args.request_id else {}
    if args.scheduled_time:
        body["scheduled_time"] = args.scheduled_time
    invocation = client.call("POST", job_path(args, ":trigger"), body=body or None)
    return Shown(invocation, f"triggered {args.project}/{args.job}: invocation {invocation['id']} "
                             f"{tables.outcome(invocation)}")


def backfill_job(client: ApiClient, args: argparse.Namespace) -> Shown:
    body = {"start": args.start, "end": args.end}
    if args.request_id:
        body["request_id"] = args.request_id
    answer = client.call("POST", job_path(args, ":backfill"), body=body)
    lines = [f"backfilled {args.project}/{args.job}: {answer['count']:,} invocations, started in order"]
    return Shown(answer, "\n".join(lines + list(answer["invocations"])))


def _instant(text: str) -> str:
    """An RFC 3339 time, checked here and sent as written."""
    try:
        parse_instant(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    return text


def _invocation_id(text: str) -> str:
    if not text.strip():
        raise argparse.ArgumentTypeError("an invocation id is not empty")
    return text


# --- invocations -------------------------------------------------------------------------

def add_invocations(subparsers: Subparsers) -> None:
    verbs = add_group(subparsers, "invocations", "list or inspect a job's invocations on a running server",
                   "Read a job's invocation history from a running Sundial server, newest first.")
    listing = add_verb(verbs, "list", list_invocations, "list a job's invocations, newest first", (
        "  %(prog)s demo heartbeat\n"
        "  %(prog)s demo heartbeat --status FAILED --limit 5\n"
        "  %(prog)s demo heartbeat --json | jq '.invocations[0]'"))
    listing.add_argument("--status", choices=[status.value for status in InvocationStatus], type=str.upper,
                         help="only invocations with this status; the history is read newest first until "
                              "--limit of them are found or it ends")
    listing.add_argument("--limit", type=positive_int, default=DEFAULT_INVOCATION_LIMIT, metavar="N",
                         help=f"show at most N invocations (default {DEFAULT_INVOCATION_LIMIT})")
    follow.add_follow(verbs)
    get = add_verb(verbs, "get", get_invocation, "show one invocation with its log",
                "  %(prog)s demo heartbeat 20261125T120000Z-3f9c\n"
                "  %(prog)s demo heartbeat 20261125T120000Z-3f9c --json")
    get.add_argument("invocation", metavar="INVOCATION", type=_invocation_id,
                     help="the invocation id (see `invocations list`)")


def list_invocations(client: ApiClient, args: argparse.Namespace) -> Shown:
    """Without --status, exactly --limit rows are asked for; with it, whole pages are
    read and filtered here (the API has no status filter), and next_page_token is the
    one after the last page read."""
    path = job_path(args, "/invocations")
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
    invocation = client.call("GET", job_path(args, f"/invocations/{segment(args.invocation)}"))
    return Shown(invocation, tables.invocation_fields(invocation))
