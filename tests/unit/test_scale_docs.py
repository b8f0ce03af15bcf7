"""docs/SCALE.md and docs/COST.md say what the benches print: the scale table's 10,000-job
rows are the model run again (bench/scale_table.py, about a second), and COST.md's monthly
bill is its own table of use per invocation through bench/cost_model.py."""

from __future__ import annotations

import re
from pathlib import Path

from bench.cost_model import Usage, monthly_cost
from bench.scale_table import HEADER, rows

DOCS = Path(__file__).resolve().parents[2] / "docs"


def test_scale_mds_table_holds_the_models_rows_for_10000_jobs():
    page = (DOCS / "SCALE.md").read_text()
    assert HEADER in page
    written = [line for line in page.splitlines() if line.startswith("| 10,000 |")]
    assert written == rows(10_000)


def _use(page: str, title: str) -> Usage:
    cells = re.search(rf"^\| {title} \| ([\d.]+) \| \**([\d.]+)\** \| \**([\d.]+)\** \|", page, re.M)
    assert cells, title
    return Usage(reads=float(cells[1]), writes=float(cells[2]), enqueues=float(cells[3]))


def test_cost_mds_monthly_bill_is_its_use_per_invocation_through_the_cost_model():
    page = (DOCS / "COST.md").read_text()
    minutely, hourly = _use(page, "runs every minute"), _use(page, "runs every hour")
    for title, invocations, usage in (("10,000 jobs every minute", 432_000_000, minutely),
                                      ("10,000 jobs every hour", 7_200_000, hourly)):
        total = round(sum(monthly_cost(invocations, usage).values()))
        assert re.search(rf"^\| {title} \|.*\*\*\${total:,}\*\* \|$", page, re.M), (title, total)
