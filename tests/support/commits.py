"""What each committed transaction of a Datastore store wrote and read: for the tests
and bench/commit_budget.py that hold every step to one commit's budget.

`MeteredStore` wraps a DatastoreJobStore and notes, per committed transaction, the
entities it wrote (puts and deletes), the entities it read, the lookup calls it made
(a batched lookup counts once) and how long it took, from the store's own counters.
"""

from __future__ import annotations

import time
from dataclasses import dataclass


@dataclass(frozen=True)
class Commit:
    entities: int
    reads: int
    lookups: int | None  # None: a store that does not count lookups
    seconds: float


class MeteredStore:
    def __init__(self, store):
        self.inner = store
        self.commits: list[Commit] = []

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def run_in_transaction(self, body):
        before = dict(self.inner.counters)
        started = time.perf_counter()
        result = self.inner.run_in_transaction(body)
        seconds = time.perf_counter() - started
        after = self.inner.counters
        lookups = after["lookups"] - before["lookups"] if "lookups" in after else None
        self.commits.append(Commit(after["writes"] - before["writes"], after["reads"] - before["reads"],
                                   lookups, seconds))
        return result

    def largest(self) -> Commit:
        return max(self.commits, key=lambda commit: commit.entities)

    def most_lookups(self) -> int:
        return max((commit.lookups or 0 for commit in self.commits), default=0)
