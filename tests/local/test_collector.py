"""A serving process's garbage collector (app/collector.py): what exists once it is built
is frozen out of the collector's reach, and collections run less often."""

import gc

from app.collector import THRESHOLDS, settle_collector


def test_a_built_process_freezes_what_it_holds_and_collects_less_often():
    before = gc.get_threshold()
    try:
        settle_collector()
        assert gc.get_freeze_count() > 0
        assert gc.get_threshold() == THRESHOLDS and THRESHOLDS[0] > before[0]
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)
