"""Seeds the simulator failed on, kept as regressions once the defect was fixed, and
the findings not fixed yet (run with the settings that show them).

Each seed depends on the simulator as it is: a change to the world or the fault mix
draws other runs from the same seed. A defect's own test (named here) is what keeps it
fixed for good; the seed is how it was found.
"""

from __future__ import annotations

from dataclasses import dataclass

from sim.ports import FaultMix
from sim.simulation import Settings


@dataclass(frozen=True)
class Finding:
    seed: int
    what: str
    test: str  # the test that keeps it fixed ("" while it is open)
    mix: FaultMix = FaultMix()

    def settings(self) -> Settings:
        return Settings(self.seed, mix=self.mix)


FIXED = (
    Finding(34, "config import: a file reverted after an import failed midway was taken as applied",
            "tests/engine/test_import_revert.py"),
    Finding(40, "config import: the same defect, another run to it", "tests/engine/test_import_revert.py"),
    Finding(7, "a duplicate delivery of a retried start task, while the retry runs, settled the retry's live"
               " attempt as interrupted: the attempt was sent again beside it (a retried task now waits out"
               " the attempt's lease)", "tests/engine/test_redelivery_lease.py", FaultMix(duplicate_keeps_retry=True)),
)

OPEN: tuple[Finding, ...] = ()
