"""The Datastore store's housekeeping queries: the watchdog's pages and the clean-up's deletes.

All of them run outside transactions, keys only, on single-property indexes (and the
one composite index of the old layout's retention query, index.yaml), and each is bounded
by the `limit` its caller passes, so that a run of the watchdog or the clean-up can stop at
its time budget between two calls and the next run go on from there. The watchdog and
retention read the sharded time strings of datastore_entities.py, one query per shard,
and the old layout's timestamp indexes for entities not written since.

The watchdog pages with Datastore query cursors, behind the number of the source (the old
index or a shard) they belong to: a cursor is a position in that source's index
(watchdog_key, key), so jobs repaired meanwhile, whose watchdog time moved past `now`,
neither shift the next page nor come back in it.

The clean-up needs no cursor for invocations: what it deletes leaves the query, and
the query selects finished statuses only, so a running invocation never sits at its
head. Audit entries need none either: every one older than the cutoff goes. Progress
rows are selected by their scheduled time alone (their status is their invocation's),
so those of a long fan-out still running do sit at the head; their query pages with a
cursor, which steps over them within a run.
"""

from __future__ import annotations

from datetime import datetime
from typing import Callable, Protocol

from google.cloud import ndb
from google.cloud.ndb import _datastore_query

from engine.adapters.cloud.datastore_entities import (
    EPOCH,
    TERMINAL,
    AuditEntity,
    InvocationEntity,
    JobEntity,
    ProgressEntity,
    job_key,
    shard_range,
    sharded_time,
    split_job_name,
)


class CountingStore(Protocol):
    """What these queries need of the store (datastore_store.py): its counters, how
    often it runs a transaction again, and the shards of its indexed times."""

    retries: int
    index_shards: int

    def count(self, **amounts: int) -> None: ...


# The old layout's indexed timestamps: the model declares them unindexed now, which ndb
# refuses to filter on, so the old indexes are queried by name.
OLD_WATCHDOG_AT = ndb.GenericProperty("watchdog_at")
OLD_CREATED_TIME = ndb.GenericProperty("created_time")
OLD_SCHEDULED_TIME = ndb.GenericProperty("scheduled_time")


def _cursor(token: str | None) -> _datastore_query.Cursor | None:
    return _datastore_query.Cursor(urlsafe=token.encode()) if token else None


def _token(cursor: _datastore_query.Cursor | None, more: bool, full: bool) -> str | None:
    # ndb's fetch_page fills a page while the query has more, so a short page was the
    # last (`more` alone is often True at the end: Datastore cannot always tell).
    return cursor.urlsafe().decode() if more and full and cursor is not None else None


def due_page(store: CountingStore, now: datetime, limit: int,
             cursor: str | None) -> tuple[list[tuple[str, str]], str | None]:
    """A page of the jobs whose watchdog time is before `now`, and the token of the next:
    the old layout's index of `watchdog_at` (jobs not written since it changed), then
    each shard of `watchdog_key`."""
    keys, token = _page(store, lambda source: _due_query(source, now), limit, cursor)
    # A job whose write moved it from the old index to the new meanwhile is listed once.
    return [split_job_name(key.id()) for key in dict.fromkeys(keys)], token


def _page(store: CountingStore, query_of: Callable[[int], ndb.Query], limit: int,
          cursor: str | None) -> tuple[list[ndb.Key], str | None]:
    """A page of keys from the sources 0 (the old layout's index) .. index_shards (the
    shards), in that order, and the token of the next, "SOURCE:CURSOR". The token's
    source is read from its cursor and every later one from its start, all at once: one
    round trip, which is the whole run when nothing is due. A source that fills the
    page is read again for as many as fit, to have the cursor to go on from."""
    first, start = (0, None) if not cursor else (int(cursor.split(":", 1)[0]), cursor.split(":", 1)[1] or None)
    queries = [query_of(source) for source in range(first, store.index_shards + 1)]
    head = queries[0].fetch_page_async(limit, start_cursor=_cursor(start), keys_only=True)
    rest = [query.fetch_async(limit=limit, keys_only=True) for query in queries[1:]]
    store.count(queries=len(queries))
    keys, after, more = head.result()
    token = _token(after, more, len(keys) >= limit)
    if token is not None:
        return keys, f"{first}:{token}"
    for source, future in enumerate(rest, start=first + 1):
        found, room = future.result(), limit - len(keys)
        if len(found) < limit and len(found) <= room:
            keys.extend(found)
            continue
        if room == 0:
            return keys, f"{source}:"
        found, after, more = queries[source - first].fetch_page(room, keys_only=True)
        store.count(queries=1)
        token = _token(after, more, len(found) >= room)
        keys.extend(found)
        if token is not None:
            return keys, f"{source}:{token}"
    return keys, None


def _due_query(source: int, now: datetime) -> ndb.Query:
    if source == 0:  # the old layout; bounded from below so that no watchdog (null) never matches
        return JobEntity.query(OLD_WATCHDOG_AT > EPOCH, OLD_WATCHDOG_AT < now).order(OLD_WATCHDOG_AT)
    low, high = shard_range(source - 1, now)
    return JobEntity.query(JobEntity.watchdog_key > low, JobEntity.watchdog_key < high).order(JobEntity.watchdog_key)


def defer(store: CountingStore, project: str, job_id: str, until: datetime) -> bool:
    """In a transaction of its own, so that a repair committing meanwhile is never
    undone; the entity's other properties are written back as they were read."""
    def body() -> bool:
        entity = job_key(project, job_id).get()
        if entity is None or entity.watchdog_at is None or entity.watchdog_at >= until:
            return False
        entity.watchdog_at = until
        # An old layout's job (no watchdog_key) moves to the new index here.
        entity.watchdog_key = sharded_time(project, job_id, until, store.index_shards)
        entity.put()
        return True

    moved = bool(ndb.transaction(body, retries=store.retries))
    store.count(reads=1, writes=int(moved), transactions=1)
    return moved


def delete_invocations(store: CountingStore, cutoff: datetime, limit: int) -> int:
    """Outside a transaction: the keys span many jobs' groups, deleting is
    idempotent, and a finished invocation never changes status again. One query per
    shard of `retention_key`, and one per finished status on the old layout's
    (status, created_time) index (index.yaml), all at once: one round trip."""
    queries = [InvocationEntity.query(InvocationEntity.retention_key > low, InvocationEntity.retention_key < high)
               for low, high in (shard_range(shard, cutoff) for shard in range(store.index_shards))]
    queries += [InvocationEntity.query(InvocationEntity.status == status, OLD_CREATED_TIME > EPOCH,
                                       OLD_CREATED_TIME < cutoff) for status in TERMINAL]
    futures = [query.fetch_async(limit=limit, keys_only=True) for query in queries]
    keys = list(dict.fromkeys(key for future in futures for key in future.result()))[:limit]
    store.count(queries=len(futures))
    _delete(store, keys)
    return len(keys)


def delete_progress(store: CountingStore, cutoff: datetime, limit: int,
                    cursor: str | None) -> tuple[int, str | None]:
    """Progress entities (engine/event_rows.py) of fan-outs scheduled before `cutoff`
    whose invocation has finished or is gone."""
    keys, token = _page(store, lambda source: _progress_query(source, cutoff), limit, cursor)
    keys = list(dict.fromkeys(keys))  # one moved from the old index to the new meanwhile
    parents = list(dict.fromkeys(key.parent() for key in keys))
    invocations = ndb.get_multi(parents) if parents else []
    store.count(queries=1, reads=len(parents))
    done = {key for key, entity in zip(parents, invocations) if entity is None or entity.status in TERMINAL}
    doomed = [key for key in keys if key.parent() in done]
    _delete(store, doomed)
    return len(doomed), token


def _progress_query(source: int, cutoff: datetime) -> ndb.Query:
    if source == 0:  # the old layout
        return ProgressEntity.query(OLD_SCHEDULED_TIME > EPOCH, OLD_SCHEDULED_TIME < cutoff).order(OLD_SCHEDULED_TIME)
    low, high = shard_range(source - 1, cutoff)
    return ProgressEntity.query(ProgressEntity.retention_key > low,
                                ProgressEntity.retention_key < high).order(ProgressEntity.retention_key)


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
