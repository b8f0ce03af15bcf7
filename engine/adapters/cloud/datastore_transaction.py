"""DatastoreTransaction: one run of a transaction body on the Datastore store
(datastore_store.py), with the port's reads and writes."""

from __future__ import annotations

import json
from typing import Any, Protocol

from google.cloud import ndb

from engine.adapters.cloud.datastore_entities import (
    InboxEntity,
    ProgressEntity,
    audit_entity,
    inbox_key,
    invocation_entity,
    invocation_key,
    invocation_row,
    job_entity,
    job_key,
    job_row,
    progress_entity,
    progress_key,
    project_entity,
    project_key,
    project_row,
)
from engine.adapters.cloud.datastore_limits import MAX_LOOKUP_KEYS, check_count, check_size
from engine.ports import AuditEntry, InvocationRow, ProjectRow, StoredJob, Task


class UseCounter(Protocol):
    """What a transaction tells its store: the reads and writes it made (for the cost
    figures of bench/cloud_cost.py); and the store's shards of indexed times."""

    index_shards: int

    def count(self, **amounts: int) -> None: ...


class DatastoreTransaction:
    """One run of a transaction body: reads go to Datastore (or to this run's own
    writes), writes and tasks wait in memory until the body has returned."""

    def __init__(self, store: UseCounter):
        self.store = store
        self.writes: dict[ndb.Key, ndb.Model | None] = {}  # None: delete
        # What this run read: a transaction reads a snapshot, so a second look at a key
        # (a step reads an invocation's row, then updates it) costs no second read.
        self._read: dict[ndb.Key, ndb.Model | None] = {}
        self.tasks: list[Task] = []
        self._task_names: set[str] = set()

    def _get(self, key: ndb.Key) -> ndb.Model | None:
        if key in self.writes:
            return self.writes[key]
        if key not in self._read:
            self._read[key] = key.get()
            self.store.count(reads=1, lookups=1)
        return self._read[key]

    def flush(self) -> None:
        """Hand the writes to ndb, which sends them with the commit; an entity over
        production's size limit, or more entities than one commit takes, stops the
        transaction first (datastore_limits.py)."""
        check_count(self.writes)
        puts = [entity for entity in self.writes.values() if entity is not None]
        for entity in puts:
            check_size(entity)
        deletes = [key for key, entity in self.writes.items() if entity is None]
        if puts:
            ndb.put_multi(puts)
        if deletes:
            ndb.delete_multi(deletes)

    def get_job(self, project: str, job_id: str) -> StoredJob | None:
        entity = self._get(job_key(project, job_id))
        return None if entity is None else job_row(entity)

    def put_job(self, job: StoredJob) -> None:
        entity = job_entity(job, self.store.index_shards)
        self.writes[entity.key] = entity

    def delete_job(self, project: str, job_id: str) -> None:
        # Only the job entity: its child invocations stay, as history, until retention.
        self.writes[job_key(project, job_id)] = None

    def get_invocation(self, project: str, job_id: str, invocation_id: str) -> InvocationRow | None:
        entity = self._get(invocation_key(project, job_id, invocation_id))
        return None if entity is None else invocation_row(entity)

    def put_invocation(self, row: InvocationRow) -> None:
        entity = invocation_entity(row, self.store.index_shards)
        self.writes[entity.key] = entity

    def existing_invocations(self, project: str, job_id: str, invocation_ids: list[str]) -> set[str]:
        found: set[str] = set()
        keys = []
        for invocation_id in invocation_ids:
            key = invocation_key(project, job_id, invocation_id)
            if key in self.writes:
                if self.writes[key] is not None:
                    found.add(invocation_id)
            else:
                keys.append(key)
        for start in range(0, len(keys), MAX_LOOKUP_KEYS):
            batch = keys[start:start + MAX_LOOKUP_KEYS]
            entities = ndb.get_multi(batch)
            self.store.count(reads=len(batch), lookups=1)
            found.update(key.id() for key, entity in zip(batch, entities) if entity is not None)
        return found

    def get_progress(self, project: str, job_id: str, invocation_id: str, part: str) -> dict[str, Any] | None:
        entity = self._get(progress_key(project, job_id, invocation_id, part))
        return None if entity is None else dict(json.loads(entity.value))

    def put_progress(self, project: str, job_id: str, invocation_id: str, part: str, value: dict[str, Any]) -> None:
        entity = progress_entity(progress_key(project, job_id, invocation_id, part), value, self.store.index_shards)
        self.writes[entity.key] = entity

    def list_progress(self, project: str, job_id: str, invocation_id: str) -> dict[str, dict[str, Any]]:
        ancestor = invocation_key(project, job_id, invocation_id)
        found = {entity.key.id(): json.loads(entity.value) for entity in ProgressEntity.query(ancestor=ancestor)}
        self.store.count(reads=max(1, len(found)))
        for key, entity in self.writes.items():  # this run's own writes win
            if key.kind() == "Progress" and key.parent() == ancestor:
                if entity is None:
                    found.pop(key.id(), None)
                else:
                    found[key.id()] = json.loads(entity.value)
        return found

    def get_inbox(self, project: str, job_id: str, key: str) -> dict[str, Any] | None:
        entity = self._get(inbox_key(project, job_id, key))
        return None if entity is None else dict(json.loads(entity.value))

    def put_inbox(self, project: str, job_id: str, key: str, value: dict[str, Any]) -> None:
        entity = InboxEntity(key=inbox_key(project, job_id, key), value=json.dumps(value, separators=(",", ":")))
        self.writes[entity.key] = entity

    def list_inbox(self, project: str, job_id: str, limit: int) -> dict[str, dict[str, Any]]:
        ancestor = job_key(project, job_id)
        # Keys by a query outside the transaction, then the rows by lookups in it: a
        # query in a transaction locks its whole range on Firestore, and every append
        # (a new key in it) would wait for the fold; a lookup locks only the rows read.
        keys = [key for key in _inbox_keys(ancestor, limit) if key not in self.writes]
        entities = ndb.get_multi(keys) if keys else []
        self.store.count(queries=1, reads=max(1, len(keys)), lookups=1 if keys else 0)
        found = {key.id(): json.loads(entity.value) for key, entity in zip(keys, entities) if entity is not None}
        for key, written in self.writes.items():  # this run's own writes win
            if key.kind() == "Inbox" and key.parent() == ancestor and written is not None:
                found[key.id()] = json.loads(written.value)
        return dict(sorted(found.items())[:limit])

    def delete_inbox(self, project: str, job_id: str, key: str) -> None:
        self.writes[inbox_key(project, job_id, key)] = None

    def put_audit(self, entry: AuditEntry) -> None:
        entity = audit_entity(entry)
        self.writes[entity.key] = entity

    def dequeue(self, name: str) -> None:
        """Cloud Tasks cannot take a task off in a transaction: it comes, and is found stale."""

    def enqueue(self, task: Task) -> None:
        # Like the SQLite queue, a name enqueued twice in one transaction is one task.
        if task.name not in self._task_names:
            self._task_names.add(task.name)
            self.tasks.append(task)

    def get_project(self, project: str) -> ProjectRow | None:
        entity = self._get(project_key(project))
        return None if entity is None else project_row(entity)

    def put_project(self, row: ProjectRow) -> None:
        entity = project_entity(row)
        self.writes[entity.key] = entity

    def delete_project(self, project: str) -> None:
        self.writes[project_key(project)] = None


@ndb.non_transactional()  # type: ignore[untyped-decorator]  # ndb has no type information
def _inbox_keys(ancestor: ndb.Key, limit: int) -> list[ndb.Key]:
    """The keys of a job's pending rows, read outside the caller's transaction
    (ancestor queries are strongly consistent, so a row committed before is listed)."""
    keys: list[ndb.Key] = InboxEntity.query(ancestor=ancestor).fetch(limit=limit, keys_only=True)
    return keys
