"""`invocations follow PROJECT [JOB]`: new and finished invocations as they happen.

The API has no stream, so this polls: every --interval it reads the job's newest
invocations (with a project, its jobs first, then the history of each job whose last
or active invocations changed since the last look), and prints one line each time an
invocation is first seen running or ended, or changes status. Those already ended
when it starts are history (`invocations list`), not news: it prints only those under
way then. An invocation made ready ahead of its time (STARTING, nothing sent) is shown
once it starts. `--output json` prints each as one line of the API's JSON (JSON Lines).
A server that stops answering is waited for (a note on stderr); an error answer ends it.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import cli.tables as tables
from cli.api_client import ApiClient, Unreachable, segment
from cli.common import Subparsers, positive_int
from cli.remote import Ids, Shown, add_verb
from statemachine.durations import parse_duration
from statemachine.vocabulary import TERMINAL_STATUSES

PAGE = 50  # a job's newest invocations read per look
_ENDED = {status.value for status in TERMINAL_STATUSES}
Key = tuple[str, str]  # (job, invocation)


def add_follow(verbs: Subparsers) -> None:
    follow = add_verb(verbs, "follow", follow_invocations, "print new and finished invocations as they happen "
                      "(Ctrl-C stops)", (
                          "  %(prog)s demo\n  %(prog)s demo heartbeat\n"
                          "  %(prog)s demo --output json | jq -c 'select(.status == \"FAILED\")'\n"
                          "  %(prog)s demo exporter --count 1 --duration 2h   # wait for the next one"),
                      ids=Ids.PROJECT_AND_MAYBE_JOB)
    follow.add_argument("--interval", type=_seconds, default=2.0, metavar="DURATION",
                        help="how often to look (default 2s; e.g. 500ms, 10s)")
    follow.add_argument("--duration", type=_seconds, metavar="DURATION",
                        help="stop after this long (e.g. 10m); default: until Ctrl-C")
    follow.add_argument("--count", type=positive_int, metavar="N", help="stop after N lines")


def _seconds(text: str) -> float:
    try:
        seconds = parse_duration(text).total_seconds()
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    if seconds <= 0:
        raise argparse.ArgumentTypeError(f"must be more than 0, got {text!r}")
    return seconds


@dataclass
class Watch:
    """What has been seen: each invocation's last status, each job's last view, and for a
    job idle at the start whose history was not read, its newest invocation then (that
    one and the older ones are history, not news)."""

    client: ApiClient
    project: str
    job: str | None
    statuses: dict[Key, str] = field(default_factory=dict)
    views: dict[str, tuple[Any, ...]] = field(default_factory=dict)
    history_from: dict[str, str | None] = field(default_factory=dict)

    def look(self, first: bool = False) -> list[dict[str, Any]]:
        """The invocations that are news since the last look, oldest first. The first
        look of a project reads the history of the jobs with invocations under way only."""
        news = []
        for row in self._rows(first):
            key = (row["job"], row["id"])
            if not _has_run(row) or self.statuses.get(key) == row["status"]:
                continue
            self.statuses[key] = row["status"]
            news.append(row)
        return sorted(news, key=lambda row: (_when(row) or "", row["id"]))

    def _rows(self, first: bool) -> Iterator[dict[str, Any]]:
        views = self._job_views() if self.job is None else {self.job: ()}
        for job, view in views.items():
            if self.job is None and self.views.get(job) == view:
                continue
            if first and self.job is None and not view[-1]:  # idle: its history stays unread
                self.history_from[job] = view[0]
            else:
                yield from self._news_of(job)
            self.views[job] = view  # only once read: a look cut short reads it again

    def _news_of(self, job: str) -> Iterator[dict[str, Any]]:
        path = f"/projects/{segment(self.project)}/jobs/{segment(job)}/invocations"
        rows = self.client.call("GET", path, {"page_size": PAGE})["invocations"]
        if job in self.history_from:  # newest first: from its newest at the start on, history
            newest_then = self.history_from.pop(job)
            ids = [row["id"] for row in rows]
            cut = ids.index(newest_then) if newest_then in ids else len(rows)
            for row in rows[cut:]:
                self.statuses[(job, row["id"])] = row["status"]
            rows = rows[:cut]
        yield from rows

    def _job_views(self) -> dict[str, tuple[Any, ...]]:
        """Each job's (newest invocation, its status, start, active ones) as listed now."""
        views = {}
        for page in self.client.pages(f"/projects/{segment(self.project)}/jobs", "jobs", sys.maxsize, 1000):
            for job in page["jobs"]:
                last = job.get("last_invocation") or {}
                views[job["id"]] = (last.get("id"), last.get("status"), last.get("started_time"),
                                    tuple(job.get("active_invocations") or ()))
        return views


def _has_run(row: dict[str, Any]) -> bool:
    return row.get("started_time") is not None or row["status"] in _ENDED


def _when(row: dict[str, Any]) -> str | None:
    """When the line's news happened: the end, else the start."""
    value: str | None = row.get("finished_time") or row.get("started_time") or row.get("scheduled_time")
    return value


def follow_invocations(client: ApiClient, args: argparse.Namespace,
                       sleep: Callable[[float], None] = time.sleep,
                       clock: Callable[[], float] = time.monotonic) -> Shown:
    watch, printer = Watch(client, args.project, args.job), Printer(args.output == "json", args.count)
    # The first look marks what is there as seen; of it, only what is under way is news.
    printer.show([row for row in watch.look(first=True) if row["status"] not in _ENDED])
    ends = None if args.duration is None else clock() + args.duration
    try:
        while not printer.done and (ends is None or clock() < ends):
            sleep(args.interval if ends is None else max(0.0, min(args.interval, ends - clock())))
            printer.show(_look_again(watch, args))
    except KeyboardInterrupt:
        pass  # Ctrl-C is how one stops following: not an error
    return Shown(None, "", streamed=True)


@dataclass
class Printer:
    as_json: bool
    count: int | None
    printed: int = 0

    @property
    def done(self) -> bool:
        return self.count is not None and self.printed >= self.count

    def show(self, rows: list[dict[str, Any]]) -> None:
        for row in rows:
            if self.done:
                return
            print(json.dumps(row) if self.as_json else _line(row), flush=True)
            self.printed += 1


def _look_again(watch: Watch, args: argparse.Namespace) -> list[dict[str, Any]]:
    try:
        return watch.look()
    except Unreachable as error:
        print(f"{args.command_prog}: {error}; trying again", file=sys.stderr, flush=True)
        return []


def _line(row: dict[str, Any]) -> str:
    reason = f" ({row['reason']})" if row.get("reason") else ""
    return (f"{tables.when(_when(row))}  {row['project']}/{row['job']}  {row['id']}  {row['status']}{reason}"
            f"  scheduled {tables.when(row.get('scheduled_time'))}  trigger {row.get('trigger') or '-'}"
            f"  attempt {row.get('attempt', 0)}")
