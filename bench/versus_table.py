"""The side-by-side table of bench/versus.py: one row per figure, one column per
scheduler run, the ratio Sundial / APScheduler and which side is better."""

from __future__ import annotations

from bench.output import line

# (label, figure key, unit, which is better: "higher", "lower" or "" for neither)
BURST = [
    ("config import / adding the jobs", "setup_s", "s", "lower"),
    ("deliveries per second from T", "rate", "/s", "higher"),
    ("time from T until all delivered", "drain_s", "s", "lower"),
    ("lateness p50", "p50", "ms", "lower"),
    ("lateness p99", "p99", "ms", "lower"),
    ("lateness max", "max", "ms", "lower"),
    ("delivered", "delivered", "", "higher"),
    ("missing", "missing", "", "lower"),
    ("duplicates by invocation", "dup_invocation", "", "lower"),
    ("duplicates by job", "dup_job", "", "lower"),
]
STEADY = [
    ("lateness p50", "p50", "ms", "lower"),
    ("lateness p99", "p99", "ms", "lower"),
    ("lateness max", "max", "ms", "lower"),
    ("delivered", "delivered", "", "higher"),
    ("expected", "expected", "", ""),
    ("missing", "missing", "", "lower"),
    ("duplicates by invocation", "dup_invocation", "", "lower"),
    ("duplicates by occurrence", "dup_occurrence", "", "lower"),
]
OVERLAP = [
    ("max concurrent calls of one job", "max_concurrency", "", "lower"),
    ("deliveries in the window", "delivered", "", ""),
    ("occurrences in the window", "occurrences", "", ""),
    ("recorded skips (overlap)", "skips", "", ""),
    ("duplicates by occurrence", "dup_occurrence", "", "lower"),
]
COMMON = [
    ("APScheduler EVENT_JOB_MISSED (whole run)", "missed_events", "", "lower"),
    ("APS EVENT_JOB_MAX_INSTANCES (whole run)", "max_instances_events", "", ""),
    ("APScheduler EVENT_JOB_ERROR (whole run)", "job_errors", "", "lower"),
    ("peak RSS (VmHWM)", "rss_peak_mib", "MiB", "lower"),
    ("CPU, share of one core", "cpu_share", "%", "lower"),
]


def cell(value, unit: str) -> str:
    if value is None:
        return "-"
    if unit == "ms":
        return f"{value * 1000:,.0f} ms"
    if unit == "%":
        return f"{value:.0%}"
    if unit == "s":
        return f"{value:,.2f} s"
    if unit in ("/s", "MiB"):
        return f"{value:,.0f}{'' if unit == '/s' else ' '}{unit}"
    return f"{value:,}" if isinstance(value, int) else f"{value:,.1f}"


def ratio(ours, theirs, better: str) -> tuple[str, str]:
    if ours is None or theirs is None:
        return "-", ""
    if ours == theirs:
        return "1.00" if ours else "-", "="
    text = f"{ours / theirs:,.2f}" if theirs else "inf"
    if not better:
        return text, ""
    ours_wins = ours > theirs if better == "higher" else ours < theirs
    return text, "Sundial" if ours_wins else "APScheduler"


def print_table(name: str, sides: list[tuple[str, dict]]) -> None:
    """`sides[0]` is Sundial; every other side gets its own value, ratio and better columns."""
    rows = (BURST if name == "burst" else OVERLAP if name == "overlap" else STEADY) + COMMON
    width = 42
    heads = "".join(f"{label:>16} {'ratio':>8} {'better':>12}" if i else f"{label:>16}"
                    for i, (label, _) in enumerate(sides))
    print(f"\n{name + ': figure':<{width}}{heads}", flush=True)
    ours = sides[0][1]
    for label, key, unit, better in rows:
        values = [fig.get(key) for _, fig in sides]
        if all(v is None for v in values):
            continue
        text = f"{cell(values[0], unit):>16}"
        for value in values[1:]:
            r, who = ratio(values[0], value, better)
            text += f"{cell(value, unit):>16} {r:>8} {who:>12}"
        print(f"{label:<{width}}{text}", flush=True)
    print(flush=True)
    for label, fig in sides:
        if fig.get("missing"):
            line(f"{name}: {label} missed runs", f"{fig['missing']:,}: its times, rates and lateness above "
                                                 f"cover only the {fig['delivered']:,} it delivered")
    if name == "burst" and "rate" in ours:
        for label, fig in sides[1:]:
            if fig.get("rate"):
                goal = ours["rate"] / fig["rate"]
                line(f"burst goal: >= 3x {label} deliveries/s", f"{goal:.2f}x ({'MET' if goal >= 3 else 'MISSED'})")
