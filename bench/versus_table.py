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
    ("CPU per delivery (every process)", "cpu_per_delivery", "ms", "lower"),
]
# The goals the side-by-side run is judged by: (scenario, what, figure key, test, threshold).
# A burst's goal is a ratio to APScheduler's rate; the others are absolute.
GOALS = [
    ("burst", "deliveries/s >= 4x {aps} (default settings)", "rate", "ratio", 4.0),
    ("burst", "deliveries/s >= 6x {aps} (two processes)", "rate", "ratio", 6.0),
    ("steady spread", "CPU per delivery <= 0.6 ms", "cpu_per_delivery", "at most", 0.0006),
    ("steady aligned", "lateness p99 < 100 ms", "p99", "below", 0.1),
]


def cell(value, unit: str) -> str:
    if value is None:
        return "-"
    if unit == "ms":  # two decimals below 10 ms: CPU per delivery is a fraction of one
        ms = value * 1000
        return f"{ms:,.2f} ms" if ms < 10 else f"{ms:,.0f} ms"
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
    for _, fig in sides:
        if fig.get("cpu_s") is not None and fig.get("delivered"):
            fig["cpu_per_delivery"] = fig["cpu_s"] / fig["delivered"]
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
    print_goals(name, sides)


def print_goals(name: str, sides: list[tuple[str, dict]]) -> None:
    """One MET/MISSED line per goal of this scenario; a burst's ratio goals are judged
    against every APScheduler side that delivered."""
    ours = sides[0][1]
    for scenario, what, key, test, threshold in GOALS:
        if scenario != name or ours.get(key) is None:
            continue
        if test != "ratio":
            met = ours[key] <= threshold if test == "at most" else ours[key] < threshold
            shown = f"{ours[key] * 1000:,.2f} ms"
            line(f"{name} goal: {what}", f"{shown} ({'MET' if met else 'MISSED'})")
            continue
        for label, fig in sides[1:]:
            if fig.get(key):
                times = ours[key] / fig[key]
                verdict = "MET" if times >= threshold else "MISSED"
                line(f"{name} goal: {what.format(aps=label)}", f"{times:.2f}x ({verdict})")
