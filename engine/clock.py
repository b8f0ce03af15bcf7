"""The system clock: the one place the shell reads the time of day.

Everything else is handed a `Clock` (engine/ports.py) by the composition root, so a
test can hand it a fake one.
"""

from __future__ import annotations

from datetime import datetime, timezone


class SystemClock:
    def now(self) -> datetime:
        return datetime.now(timezone.utc)
