"""The side-by-side table judges the issue's goals from the figures it is given."""

from bench.versus_table import print_table


def goal_lines(capsys) -> list[str]:
    return [text for text in capsys.readouterr().out.splitlines() if " goal: " in text]


def test_cpu_per_delivery_counts_the_cpu_of_the_window_over_what_was_delivered(capsys):
    spread = {"p99": 0.01, "delivered": 30_000, "cpu_s": 15.0}
    print_table("steady spread", [("Sundial", spread), ("APScheduler", {"delivered": 30_000, "cpu_s": 60.0})])
    assert spread["cpu_per_delivery"] == 0.0005
    assert goal_lines(capsys)[0].endswith("0.50 ms (MET)")


def test_a_burst_is_judged_against_each_apscheduler_side(capsys):
    sundial = {"rate": 3_000.0, "delivered": 10_000}
    print_table("burst", [("Sundial", sundial), ("APScheduler", {"rate": 700.0}),
                          ("APS grace=None", {"rate": 400.0})])
    verdicts = [text.rsplit(" ", 2)[-2:] for text in goal_lines(capsys)]
    assert verdicts == [["4.29x", "(MET)"], ["7.50x", "(MET)"], ["4.29x", "(MISSED)"], ["7.50x", "(MET)"]]


def test_the_aligned_goal_is_missed_at_100_ms(capsys):
    print_table("steady aligned", [("Sundial", {"p99": 0.1, "delivered": 30_000})])
    assert goal_lines(capsys)[0].endswith("100.00 ms (MISSED)")
