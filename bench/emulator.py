"""The Datastore emulator for a benchmark: started for it and stopped after it, or the
benchmark ends at once saying why it cannot run (no Cloud SDK, no Java)."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

from tests.support.emulators import DatastoreEmulator


@contextmanager
def datastore_emulator() -> Iterator[DatastoreEmulator]:
    emulator = DatastoreEmulator()
    reason = emulator.unavailable()
    if reason:
        raise SystemExit(f"cannot run on Datastore: {reason}")
    emulator.start()
    try:
        yield emulator
    finally:
        emulator.stop()
