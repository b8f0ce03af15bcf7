"""`jobs pause` and `jobs resume`: one job, or in bulk every job of a project (`--all`) or
those with labels (`--label`), through the API's `jobs:pause` and `jobs:resume`.

A bulk action names its selection on purpose: a project alone, without `--all` or
`--label`, is a usage error rather than every job of it. The server pauses (resumes)
each selected job as its own request would, audited per job, and leaves those already
so alone; the command prints what became of each and exits 1 when any job refused.
"""

from __future__ import annotations

import argparse
from typing import Any

from cli.api_client import ApiClient, segment
from cli.common import UsageError
from cli.remote import Shown, job_line, job_path, label_selector, to_api_selector

# The server acts on the jobs one by one (a few milliseconds each on one machine): a
# project of thousands takes longer than one job's request is given.
BULK_TIMEOUT_SECONDS = 600.0


def add_selection(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--label", action="append", default=[], metavar="KEY=VALUE", type=label_selector,
                        help="instead of JOB: every job with this label (KEY alone: any value); repeat it "
                             "for several, all must match")
    parser.add_argument("--all", action="store_true", help="instead of JOB: every job of the project")


def pause_jobs(client: ApiClient, args: argparse.Namespace) -> Shown:
    if not _bulk(args):
        body = {"reason": args.reason} if args.reason else None
        job = client.call("POST", job_path(args, ":pause"), body=body)
        return Shown(job, job_line("paused", job))
    return _bulk_action(client, args, ":pause", "paused")


def resume_jobs(client: ApiClient, args: argparse.Namespace) -> Shown:
    if not _bulk(args):
        if args.reason:
            raise UsageError("--reason: a single job's resume takes none (a bulk one records it)")
        job = client.call("POST", job_path(args, ":resume"))
        return Shown(job, job_line("resumed", job))
    return _bulk_action(client, args, ":resume", "resumed")


def _bulk(args: argparse.Namespace) -> bool:
    """Whether the command names a selection rather than one job; refuses both or neither."""
    selection = bool(args.label or args.all)
    if args.label and args.all:
        raise UsageError("--all and --label: give one of them")
    if selection and args.job:
        raise UsageError(f"JOB ({args.job}) and {'--all' if args.all else '--label'}: give one of them")
    if not selection and not args.job:
        raise UsageError("name a JOB, or select jobs with --label KEY=VALUE or --all")
    return selection


def _bulk_action(client: ApiClient, args: argparse.Namespace, action: str, done: str) -> Shown:
    body: dict[str, Any] = {}
    if args.label:
        body["label"] = [to_api_selector(label) for label in args.label]
    if args.reason:
        body["reason"] = args.reason
    answer = client.call("POST", f"/projects/{segment(args.project)}/jobs{action}", body=body,
                         timeout=BULK_TIMEOUT_SECONDS)
    results = answer["results"]
    which = f"with {' '.join(args.label)} " if args.label else ""
    lines = [f"{done} {len(answer['ids'])} of {len(results)} jobs {which}in {args.project}"
             + (f": {args.reason}" if args.reason else "")]
    lines += [_result_line(result) for result in results]
    failed = any(result["outcome"] == "failed" for result in results)
    return Shown(answer, "\n".join(lines), status=1 if failed else 0)


def _result_line(result: dict[str, Any]) -> str:
    error = result.get("error")
    said = f" ({error['code']}: {error['message']})" if error else ""
    return f"  {result['id']}: {result['outcome']}{said}"
