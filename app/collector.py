"""How a serving process sets up Python's cyclic garbage collector.

Reference counting frees almost everything a delivery allocates; the cyclic collector
only looks for cycles, yet an old-generation collection walks every object the process
holds. A server's modules, settings and engine live as long as it does: they are frozen
out of the collector's reach once built, so collections walk what the work allocates.

The thresholds stay Python's own. Collections ten times rarer spent about half the time
in a steady spread load (0.2 s against 0.4 s per 20 s), but each young collection then
walked ten times as many objects: at an instant when a thousand requests are due it
paused the writer for 10-70 ms, and the lateness p99 of such instants went from 76 ms
to 130-145 ms (docs/PERFORMANCE.md).
"""

from __future__ import annotations

import gc


def settle_collector() -> None:
    """Call once the process is built, before it starts serving."""
    gc.collect()
    gc.freeze()  # what exists now lives as long as the process: never walked again
