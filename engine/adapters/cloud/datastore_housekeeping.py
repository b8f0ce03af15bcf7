"""The Datastore store's housekeeping queries: the watchdog's pages and the clean-up's deletes.

All of them run outside transactions, keys only, on single-property indexes (and the
one composite index of the retention query, index.yaml), and each is bounded by the
`limit` its caller passes, so that a run of the watchdog or the clean-up can stop at
its time budget between two calls and the next run go on from there.

The watchdog pages with Datastore query cursors: a cursor is a position in the
index (watchdog_at, key), so jobs repaired meanwhile, whose watchdog_at moved past
`now`, neither shift the next page nor come back in it.

The clean-up needs no cursor for invocations: what it deletes leaves the query, and
the query selects finished statuses only, so a running invocation never sits at its
head. Audit entries need none either: every one older than the cutoff goes. Progress
rows are selected by their scheduled time alone (their status is their invocation's),
so those of a long fan-out still running do sit at the head; their query pages with a
cursor, which steps over them within a run.
"""

from __future__ import annotations

from datetime import datetime
from typing import Protocol

from google.cloud import ndb
from google.cloud.ndb import _datastore_query

from engine.adapters.cloud.datastore_entities import (
    EPOCH,
    AuditEntity,
    InvocationEntity,
    JobEntity,
    ProgressEntity,
    job_key,
    split_job_name,
)
from statemachine.vocabulary import TERMINAL_STATUSES


class CountingStore(Protocol):
    """What these queries need of the store (datastore_store.py): its counters, and how
    often it runs a transaction again."""

    retries: int

    def count(self, **amounts: int) -> None: ...

TERMINAL = tuple(status.value for status in TERMINAL_STATUSES)


def _cursor(token: str | None):
    return _datastore_query.Cursor(urlsafe=token.encode()) if token else None


def _token(cursor, more: bool, full: bool) -> str | None:
    # ndb's fetch_page fills a page while the query has more, so a short page was the
    # last (`more` alone is often True at the end: Datastore cannot always tell).
    return cursor.urlsafe().decode() if more and full and cursor is not None else None


def due_page(store: CountingStore, now: datetime, limit: int,
             cursor: str | None) -> tuple[list[tuple[str, str]], str | None]:
    # Bounded from below so that records without a watchdog (null) never match.
    query = JobEntity.query(JobEntity.watchdog_at > EPOCH, JobEntity.watchdog_at < now).order(JobEntity.watchdog_at)
    keys, after, more = query.fetch_page(limit, start_cursor=_cursor(cursor), keys_only=True)
    store.count(queries=1)
    return [split_job_name(key.id()) for key in keys], _token(after, more, len(keys) >= limit)


def defer(store: CountingStore, project: str, job_id: str, until: datetime) -> bool:
    """In a transaction of its own, so that a repair committing meanwhile is never
    undone; the entity's other properties are written back as they were read."""
    def body() -> bool:
        entity = job_key(project, job_id).get()
        if entity is None or entity.watchdog_at is None or entity.watchdog_at >= until:
            return False
        entity.watchdog_at = until
        entity.put()
        return True

    moved = bool(ndb.transaction(body, retries=store.retries))
    store.count(reads=1, writes=int(moved), transactions=1)
    return moved


def delete_invocations(store: CountingStore, cutoff: datetime, limit: int) -> int:
    """Outside a transaction: the keys span many jobs' groups, deleting is
    idempotent, and a finished invocation never changes status again."""
    futures = [
        InvocationEntity.query(
            InvocationEntity.status == status,
            InvocationEntity.created_time > EPOCH,
            InvocationEntity.created_time < cutoff,
        ).fetch_async(limit=limit, keys_only=True)
        for status in TERMINAL
    ]  # the four queries at once: one round trip
    keys = [key for future in futures for key in future.result()][:limit]
    store.count(queries=len(futures))
    _delete(store, keys)
    return len(keys)


def delete_progress(store: CountingStore, cutoff: datetime, limit: int,
                    cursor: str | None) -> tuple[int, str | None]:
    """Progress entities (engine/event_rows.py) of fan-outs scheduled before `cutoff`
    whose invocation has finished or is gone."""
    query = ProgressEntity.query(ProgressEntity.scheduled_time > EPOCH, ProgressEntity.scheduled_time < cutoff)
    keys, after, more = query.order(ProgressEntity.scheduled_time).fetch_page(
        limit, start_cursor=_cursor(cursor), keys_only=True)
    parents = list(dict.fromkeys(key.parent() for key in keys))
    invocations = ndb.get_multi(parents) if parents else []
    store.count(queries=1, reads=len(parents))
    done = {key for key, entity in zip(parents, invocations) if entity is None or entity.status in TERMINAL}
    doomed = [key for key in keys if key.parent() in done]
    _delete(store, doomed)
    return len(doomed), _token(after, more, len(keys) >= limit)


def delete_audit(store: CountingStore, cutoff: datetime, limit: int) -> int:
    """Audit entries older than `cutoff`, keys only on the built-in index of `time`:
    what it deletes leaves the query, so no cursor is needed."""
    query = AuditEntity.query(AuditEntity.time > EPOCH, AuditEntity.time < cutoff)
    keys = query.fetch(limit=limit, keys_only=True)
    store.count(queries=1)
    _delete(store, keys)
    return len(keys)


def _delete(store: CountingStore, keys: list[ndb.Key]) -> None:
    # ndb sends these as non-transactional commits of at most 500 mutations each
    # (Datastore's limit; its batch is full at 500), all at once.
    if keys:
        ndb.delete_multi(keys)
    store.count(writes=len(keys))
