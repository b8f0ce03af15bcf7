"""A serving process's garbage collector (app/collector.py): what exists once it is built
is frozen out of the collector's reach."""

import gc

from app.collector import settle_collector


def test_a_built_process_freezes_what_it_holds():
    held = [object() for _ in range(3)]
    try:
        settle_collector()
        assert gc.get_freeze_count() >= len(held)
    finally:
        gc.unfreeze()
