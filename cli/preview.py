"""`next` and `render`: preview what a schedule and a template will do, without a server."""

from __future__ import annotations

import argparse
import json
import sys
from datetime import datetime
from typing import Iterator

from cli.common import (
    Subparsers,
    UsageError,
    add_output,
    instant,
    non_negative_int,
    positive_int,
    time_zone,
)
from config.loader import load_project_file
from config.model import ProjectConfigError
from statemachine.calendars import Calendar, next_included
from statemachine.durations import UTC
from statemachine.schedule import (
    Schedule,
    ScheduleError,
    is_clock_driven,
    next_fire,
    parse_schedule,
)
from statemachine.template import TemplateContext, TemplateError, render

PREVIEW_ID = "preview"


# --- next ----------------------------------------------------------------------------

_NEXT_EPILOG = """\
Times are printed in ZONE with its UTC offset at that instant, to the second
(e.g. 2026-03-08T03:00:00-07:00), or to the millisecond for all of them when
any is sub-second ('every 1500ms').
A schedule that never fires again prints nothing. Schedules that are not driven
by the clock ('with 10m interval', 'continuously', 'triggered') print nothing
and explain why on stderr. Exit status 2 for a bad argument.

With --exclude, the fire times that the named calendars of the project file
--calendars hold are left out, as the job's next runs leave them out.

Environment: none is read; no server or database is needed.

Examples:
  main.py next '*/5 * * * *'                          the next 5 times, in UTC
  main.py next '0 30 2 * * ?' --tz America/New_York -n 3
  main.py next 'every 1h offset 15m' --after 2026-03-08T00:00:00Z
  main.py next '0 0 9 * * MON-FRI' --calendars configs/demo.yaml --exclude holidays
"""


def add_next(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "next",
        help="print the next fire times of a schedule",
        description="Print the next N fire times of SCHEDULE strictly after --after.",
        epilog=_NEXT_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "schedule", metavar="SCHEDULE", help="e.g. '0 30 2 * * ?', '@daily', 'every 1h offset 15m'"
    )
    parser.add_argument(
        "--tz", default="UTC", metavar="ZONE", help="IANA time zone of the schedule (default UTC)"
    )
    parser.add_argument(
        "-n", dest="count", type=non_negative_int, default=5, metavar="N",
        help="how many fire times to print (default 5)",
    )
    parser.add_argument(
        "--after", metavar="ISO-8601",
        help="start strictly after this instant, which must carry an offset or Z (default now)",
    )
    parser.add_argument(
        "--calendars", metavar="FILE", help="a project file whose `calendars` --exclude names",
    )
    parser.add_argument(
        "--exclude", action="append", default=[], metavar="NAME",
        help="leave out the times this calendar of --calendars holds (repeatable)",
    )
    add_output(parser, '{"times": [...]}, the same times in one document')
    parser.set_defaults(run=run_next)


def run_next(args: argparse.Namespace) -> int:
    zone = time_zone(args.tz)
    # The command line is the shell: reading the clock once, here, is its job.
    after = instant(args.after, "--after") if args.after is not None else datetime.now(UTC)
    try:
        schedule = parse_schedule(args.schedule, args.tz)
    except ScheduleError as error:
        raise UsageError(f"SCHEDULE: {error}") from None
    if not is_clock_driven(schedule):
        print(_not_clock_driven(args.schedule), file=sys.stderr)
        fire_times = []
    else:
        fire_times = list(_next_fire_times(schedule, after, args.count, _calendars(args.calendars, args.exclude)))
    # One precision for the whole list, so that the lines line up: seconds, unless a
    # sub-second schedule (`every 1500ms`) needs milliseconds.
    timespec = "milliseconds" if any(t.microsecond for t in fire_times) else "seconds"
    shown = [fire_time.astimezone(zone).isoformat(timespec=timespec) for fire_time in fire_times]
    if args.output == "json":
        print(json.dumps({"times": shown}))
    for line in shown if args.output == "text" else []:
        print(line)
    return 0


def _calendars(path: str | None, names: list[str]) -> tuple[Calendar, ...]:
    if names and path is None:
        raise UsageError("--exclude: needs --calendars FILE, the project file that defines the calendars")
    if path is None:
        return ()
    try:
        calendars = load_project_file(path).calendars
    except (OSError, ProjectConfigError) as error:
        raise UsageError(f"--calendars: {error}") from None
    unknown = [name for name in names if name not in calendars]
    if unknown:
        raise UsageError(f"--exclude: no calendar {', '.join(unknown)} in {path} "
                         f"(it has: {', '.join(sorted(calendars)) or 'none'})")
    return tuple(calendars[name] for name in names)


def _next_fire_times(schedule: Schedule, after: datetime, count: int,
                     exclude: tuple[Calendar, ...] = ()) -> Iterator[datetime]:
    for _ in range(count):
        following = next_included(schedule, exclude, next_fire(schedule, after))
        if following is None:
            return
        yield following
        after = following


def _not_clock_driven(text: str) -> str:
    if text.strip().lower() == "triggered":
        how = "it runs only when triggered (API, UI or another job's triggers)"
    else:
        how = "it runs relative to the end of the previous invocation"
    return f"schedule {text!r} is not driven by the clock: {how}, so it has no fire times to list"


# --- render --------------------------------------------------------------------------

_RENDER_EPILOG = f"""\
The date and time variables come from --at seen in --tz. The identity variables
${{project}}, ${{jobId}} and ${{invocationId}} default to '{PREVIEW_ID}'.
${{serviceHost}} (the server's own host:port) is known only to a running server and
renders empty here. Write $${{ for a literal ${{. The result is printed followed by a
newline. Exit status 2 for an unknown variable or a bad argument.

With --exclude, the fire times that the named calendars of the project file
--calendars hold are left out, as the job's next runs leave them out.

Environment: none is read; no server or database is needed.

Examples:
  main.py render 'https://x.example.com/export?end=${{startOfHour}}' --at 2026-03-08T10:15:00Z
  main.py render '{{"day":"${{yesterdaysDate}}"}}' --at 2026-03-08T01:00:00Z --tz Europe/Paris
"""


def add_render(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "render",
        help="print a template with its ${variables} substituted",
        description="Print TEMPLATE with its variables substituted for the scheduled time --at.",
        epilog=_RENDER_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "template", metavar="TEMPLATE", help="e.g. '{\"date\":\"${yesterdaysDate}\"}'"
    )
    parser.add_argument(
        "--at", required=True, metavar="ISO-8601",
        help="the occurrence's scheduled time, with an offset or Z",
    )
    parser.add_argument(
        "--tz", default="UTC", metavar="ZONE", help="the job's IANA time zone (default UTC)"
    )
    identity = (("--project", "P", "project"), ("--job", "J", "jobId"),
                ("--invocation", "ID", "invocationId"))
    for flag, metavar, variable in identity:
        parser.add_argument(
            flag, default=PREVIEW_ID, metavar=metavar,
            help=f"value of ${{{variable}}} (default {PREVIEW_ID})",
        )
    counters = (("--attempt", "A", "attempt", positive_int, 1),
                ("--event-index", "I", "eventIndex", non_negative_int, 0),
                ("--event-count", "N", "eventCount", positive_int, 1))
    for flag, metavar, variable, kind, default in counters:
        parser.add_argument(
            flag, type=kind, default=default, metavar=metavar,
            help=f"value of ${{{variable}}} (default {default})",
        )
    add_output(parser, '{"rendered": "..."}')
    parser.set_defaults(run=run_render)


def run_render(args: argparse.Namespace) -> int:
    time_zone(args.tz)
    scheduled_time = instant(args.at, "--at")
    if args.event_index >= args.event_count:
        raise UsageError(
            f"--event-index: {args.event_index} is not below --event-count {args.event_count}"
        )
    context = TemplateContext(
        scheduled_time=scheduled_time,
        timezone=args.tz,
        project=args.project,
        job_id=args.job,
        invocation_id=args.invocation,
        attempt=args.attempt,
        event_index=args.event_index,
        event_count=args.event_count,
    )
    try:
        rendered = render(args.template, context)
        print(json.dumps({"rendered": rendered}) if args.output == "json" else rendered)
    except TemplateError as error:
        raise UsageError(f"TEMPLATE: {error}") from None
    return 0
