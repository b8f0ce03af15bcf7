"""The job page's small bar charts of duration and lateness per invocation (docs/REFERENCE.md
section 7): geometry for an inline SVG the server renders, so the page needs no JavaScript.
No Flask, no I/O.

One bar per invocation, oldest on the left; an invocation without the value (not started,
or not finished) has a bar of no height, so the bars line up across both charts and
with the history table beneath them.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Callable

from engine.ports import InvocationRow
from web.ui_filters import duration_text, lateness

WIDTH, HEIGHT = 420, 90  # the plot's size in px, axis labels outside it
LEFT, BOTTOM, TOP = 56, 16, 6  # margins: the value labels, the oldest/newest labels, headroom
GAP = 1  # px between bars


@dataclass(frozen=True)
class Bar:
    x: float
    y: float
    width: float
    height: float
    status: str
    title: str  # the bar's <title>: read out by screen readers, shown on hover


@dataclass(frozen=True)
class Chart:
    id: str
    title: str
    description: str
    bars: list[Bar]
    top_label: str  # the value at the plot's top
    width: int = WIDTH + LEFT
    height: int = HEIGHT + BOTTOM + TOP
    left: int = LEFT
    plot_top: int = TOP
    plot_bottom: int = TOP + HEIGHT


def duration_of(row: InvocationRow) -> timedelta | None:
    if row.started_time is None or row.finished_time is None:
        return None
    return row.finished_time - row.started_time


def chart(chart_id: str, title: str, rows: list[InvocationRow],
          value: Callable[[InvocationRow], timedelta | None]) -> Chart:
    """`rows` newest first (as the history reads); `value(row)`: a timedelta or None."""
    rows = list(reversed(rows))
    values = [value(row) for row in rows]
    seconds = [max(v.total_seconds(), 0.0) for v in values if v is not None]
    top = max(seconds, default=0.0) or 1.0
    step = WIDTH / max(len(rows), 1)
    bars = []
    for index, (row, amount) in enumerate(zip(rows, values)):
        height = 0.0 if amount is None else HEIGHT * max(amount.total_seconds(), 0.0) / top
        shown = duration_text(amount) if amount is not None else "no value"
        bars.append(Bar(round(LEFT + index * step, 2), round(TOP + HEIGHT - height, 2),
                        round(max(step - GAP, 1.0), 2), round(height, 2), row.status.lower(),
                        f"{row.id} · {row.status} · {shown}"))
    description = (f"{len(rows)} invocations, oldest first; the largest is {duration_text(timedelta(seconds=top))}"
                   if seconds else f"{len(rows)} invocations, none with a value yet")
    return Chart(chart_id, title, description, bars, duration_text(timedelta(seconds=top)) if seconds else "—")


def charts(rows: list[InvocationRow]) -> list[Chart]:
    """Duration (first attempt's start to the end) and lateness (scheduled time to the start)."""
    return [
        chart("duration-chart", "Duration per invocation", rows, duration_of),
        chart("lateness-chart", "Lateness per invocation (start after scheduled time)", rows,
              lateness),
    ]
