"""The Datastore entities of Sundial and their conversion to the ports' rows.

Layout (kinds and keys):

    Job         ("Job", "PROJECT/JOB")                       a root entity
    Invocation  ("Job", "PROJECT/JOB", "Invocation", ID)     a child of its job
    Progress    (... "Invocation", ID, "Progress", PART)     a fan-out's event
    Audit       ("Job", "PROJECT/JOB", "Audit", ID)          an operator's action on the job
    Project     ("Project", "PROJECT")
    Meta        ("Meta", NAME)                               e.g. the task secret

Why jobs are root entities: an entity group is named by its root key, so a
("Project", p, "Job", j) key would put every job of a project in one group and
make all of them contend for it (on legacy Datastore about one commit per
second per group). A root Job is a group of its own; listing a project's jobs
is then a query on the indexed `project` property.

Why invocations are children of their job: every invocation write happens in a
transaction that writes the job record too (see engine/recording.py), so
sharing the job's group adds no commits to it and keeps each transaction to
one group; the history listing is an ancestor query, strongly consistent even
on legacy Datastore (a trigger is listed at once); and ids sort newest first,
so key order is the listing order and needs no composite index. The cost: the
daily retention deletes commit to the job's group, and may make a concurrent
step of that job retry once.

Why a fan-out's progress is a child of its invocation: each event's step writes
its own Progress entity and only reads the Job, so the events of one occurrence
starting together lock different entities (Firestore in Datastore mode locks
entities, not groups); listing them for the watchdog is an ancestor query.

Why audit entries are children of their job: each is written in the transaction of
the action it records (engine/audit.py), which writes the job too, so it adds no
entity group to that transaction; it stays when the job is deleted, until retention.
Its id sorts newest first, so a job's entries are an ancestor query in key order; a
project's are a query on `project` ordered by `entry_id` (the key's id again, as keys
of different jobs do not sort by it: one composite index, index.yaml).

Why the times a query selects by are stored twice: Firestore takes about 500 writes a
second into an index whose values increase with time, and an aligned burst writes
the same few instants for every job at once (the job's `watchdog_at` twice per
occurrence, the invocation's `created_time`, a fan-out's events' `scheduled_time`). So those timestamps are kept, with
their names and meaning, but unindexed, and each query reads an indexed string
"SSS/TIME" instead (`sharded_time`): SSS is one of INDEX_SHARDS shards fixed by a
stable hash of the job, so a burst's writes land in INDEX_SHARDS separate ranges
of the index and the query runs once per shard. Entities written before (the
timestamp indexed, no string) are still found: the housekeeping queries also read
the old indexes, which only such entities are in, until their next write.

Every property is declared, none is computed by ndb (no auto_now), and only
the properties a query filters on are indexed. Loading builds fresh rows from
each entity with explicit defaults, and writing builds fresh entities from the
rows: a property an older version did not write reads as its default, and a
property this version no longer declares is dropped at the next write, never
carried along.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from google.cloud import ndb

from engine.ports import AuditEntry, InvocationRow, JobSource, ProjectRow, StoredJob
from engine.recording import notification_text, stored_notification
from statemachine.definition import JobDefinition
from statemachine.durations import UTC
from statemachine.ids import scheduled_millis
from statemachine.record_form import record_from_dict, record_to_dict
from statemachine.shards import shard_of
from statemachine.vocabulary import TERMINAL_STATUSES, InvocationStatus, Trigger

# Datastore sorts null before every timestamp, so `watchdog_at < now` alone would
# also match records without a watchdog; queries bound times from below by this.
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

# The ranges an indexed time is spread over: 256 x ~500 writes/s is what an aligned
# burst of a million jobs writes (docs/SCALE.md). Part of the stored layout: a new value
# would leave the stored strings in the old shards, so it is not a setting; only the
# tests give the store fewer, for speed (each query of the housekeeping runs per shard).
INDEX_SHARDS = 256
TERMINAL = tuple(status.value for status in TERMINAL_STATUSES)


def shard_prefix(shard: int) -> str:
    return f"{shard:03d}/"


def sharded_time(project: str, job_id: str, at: datetime | None, shards: int = INDEX_SHARDS) -> str | None:
    """"SSS/YYYY-MM-DDTHH:MM:SS.ffffff" (UTC, fixed width, so string order is time order
    within a shard); None for no time, which no range query matches."""
    if at is None:
        return None
    return f"{shard_prefix(shard_of(project, job_id, shards))}{at.astimezone(UTC):%Y-%m-%dT%H:%M:%S.%f}"


def shard_range(shard: int, before: datetime) -> tuple[str, str]:
    """The bounds (exclusive) of shard `shard`'s strings of a time before `before`."""
    return shard_prefix(shard), f"{shard_prefix(shard)}{before.astimezone(UTC):%Y-%m-%dT%H:%M:%S.%f}"


def _json(value: object) -> str:
    return json.dumps(value, separators=(",", ":"))


def _loads(text: str | None, default: Any) -> Any:  # JSON: any value
    return default if not text else json.loads(text)


class JobEntity(ndb.Model):  # type: ignore[misc]  # ndb has no type information
    project = ndb.StringProperty()  # indexed: list_jobs
    job_id = ndb.TextProperty()
    record = ndb.TextProperty()  # record_to_dict(record) as JSON
    definition = ndb.TextProperty()  # JobDefinition.to_dict() as JSON
    source = ndb.TextProperty()
    config_error = ndb.TextProperty()
    deleted = ndb.BooleanProperty(indexed=False)  # StoredJob.deleted
    state = ndb.TextProperty()  # a copy from the record, for people reading the console
    # Unindexed (see the module's docstring): the watchdog queries `watchdog_key`.
    watchdog_at = ndb.DateTimeProperty(tzinfo=UTC, indexed=False)
    watchdog_key = ndb.StringProperty()  # indexed: sharded_time(watchdog_at), the watchdog query

    @classmethod
    def _get_kind(cls) -> str:
        return "Job"


class InvocationEntity(ndb.Model):  # type: ignore[misc]  # ndb has no type information
    status = ndb.StringProperty()  # indexed: a job's history by status (index.yaml)
    reason = ndb.TextProperty()
    scheduled_time = ndb.DateTimeProperty(tzinfo=UTC, indexed=False)
    trigger = ndb.TextProperty()
    created_time = ndb.DateTimeProperty(tzinfo=UTC, indexed=False)
    # Indexed: retention. sharded_time(created_time) once the invocation has finished,
    # None before (a running invocation is never removed, so it is in no range).
    retention_key = ndb.StringProperty()
    started_time = ndb.DateTimeProperty(tzinfo=UTC, indexed=False)
    finished_time = ndb.DateTimeProperty(tzinfo=UTC, indexed=False)
    attempt = ndb.IntegerProperty(indexed=False)
    event_count = ndb.IntegerProperty(indexed=False)
    log = ndb.TextProperty()  # the log entries as a JSON list
    # The on_failure notification's state as JSON; absent on entities written before
    # it existed, whose state is read from their log once (recording.stored_notification).
    notification = ndb.TextProperty()

    @classmethod
    def _get_kind(cls) -> str:
        return "Invocation"


class ProgressEntity(ndb.Model):  # type: ignore[misc]  # ndb has no type information
    """One part of a fan-out invocation's progress (engine/event_rows.py)."""

    value = ndb.TextProperty()  # the part as JSON
    # Every event of an occurrence writes one, all of an aligned burst the same instant:
    # unindexed, and retention reads sharded_time(scheduled_time) (the module's docstring).
    scheduled_time = ndb.DateTimeProperty(tzinfo=UTC, indexed=False)
    retention_key = ndb.StringProperty()  # indexed: retention

    @classmethod
    def _get_kind(cls) -> str:
        return "Progress"


class InboxEntity(ndb.Model):  # type: ignore[misc]  # ndb has no type information
    """One pending trigger of a job (engine/inbox.py), a child of its job: its own
    entity, so appending it locks nothing the job's steps hold; nothing indexed."""

    value = ndb.TextProperty()  # the row as JSON

    @classmethod
    def _get_kind(cls) -> str:
        return "Inbox"


class AuditEntity(ndb.Model):  # type: ignore[misc]  # ndb has no type information
    """One operator action (engine/audit.py), a child of its job."""

    project = ndb.StringProperty()  # indexed: a project's entries (with entry_id, index.yaml)
    entry_id = ndb.StringProperty()  # indexed: the key's id, the project-wide order
    time = ndb.DateTimeProperty(tzinfo=UTC)  # indexed: retention
    actor = ndb.TextProperty()
    action = ndb.TextProperty()
    detail = ndb.TextProperty()  # JSON object

    @classmethod
    def _get_kind(cls) -> str:
        return "Audit"


class ProjectEntity(ndb.Model):  # type: ignore[misc]  # ndb has no type information
    config_hash = ndb.TextProperty()
    config_error = ndb.TextProperty()
    job_errors = ndb.TextProperty()  # JSON list of strings
    settings = ndb.TextProperty()  # JSON object: acl, allowed_hosts, throttles, defaults

    @classmethod
    def _get_kind(cls) -> str:
        return "Project"


class MetaEntity(ndb.Model):  # type: ignore[misc]  # ndb has no type information
    value = ndb.TextProperty()

    @classmethod
    def _get_kind(cls) -> str:
        return "Meta"


# --- keys ---------------------------------------------------------------------------

def job_key(project: str, job_id: str) -> ndb.Key:
    # Project ids cannot contain "/", so the first "/" splits the name again.
    return ndb.Key(JobEntity, f"{project}/{job_id}")


def split_job_name(name: str) -> tuple[str, str]:
    project, job_id = name.split("/", 1)
    return project, job_id


def invocation_key(project: str, job_id: str, invocation_id: str) -> ndb.Key:
    return ndb.Key(JobEntity, f"{project}/{job_id}", InvocationEntity, invocation_id)


def progress_key(project: str, job_id: str, invocation_id: str, part: str) -> ndb.Key:
    return ndb.Key(JobEntity, f"{project}/{job_id}", InvocationEntity, invocation_id, ProgressEntity, part)


def progress_entity(key: ndb.Key, value: dict[str, Any], shards: int = INDEX_SHARDS) -> ProgressEntity:
    scheduled = datetime.fromtimestamp(scheduled_millis(key.parent().id()) / 1000, UTC)
    project, job_id = split_job_name(key.parent().parent().id())
    return ProgressEntity(key=key, value=_json(value), scheduled_time=scheduled,
                          retention_key=sharded_time(project, job_id, scheduled, shards))


def inbox_key(project: str, job_id: str, key: str) -> ndb.Key:
    return ndb.Key(JobEntity, f"{project}/{job_id}", InboxEntity, key)


def audit_key(project: str, job_id: str, entry_id: str) -> ndb.Key:
    return ndb.Key(JobEntity, f"{project}/{job_id}", AuditEntity, entry_id)


def project_key(project: str) -> ndb.Key:
    return ndb.Key(ProjectEntity, project)


def meta_key(name: str) -> ndb.Key:
    return ndb.Key(MetaEntity, name)


# --- rows <-> entities ------------------------------------------------------------------

def job_entity(job: StoredJob, shards: int = INDEX_SHARDS) -> JobEntity:
    record = job.record
    return JobEntity(
        key=job_key(record.project, record.job_id),
        project=record.project,
        job_id=record.job_id,
        record=_json(record_to_dict(record)),
        definition=_json(job.definition.to_dict()),
        source=job.source,
        config_error=job.config_error,
        deleted=job.deleted,
        state=record.state.value,
        watchdog_at=record.watchdog_at,
        watchdog_key=sharded_time(record.project, record.job_id, record.watchdog_at, shards),
    )


def job_row(entity: JobEntity) -> StoredJob:
    if not entity.record:
        raise ValueError(f"job entity {entity.key.id()!r} has no record")
    definition = _loads(entity.definition, {})
    # Written before `deleted` was a property: the mark was a key of the definition.
    # Read here, it is dropped from the entity at the job's next write.
    marked = definition.pop("deleted", False) is True
    return StoredJob(
        record_from_dict(json.loads(entity.record)),
        JobDefinition.from_dict(definition),
        JobSource(entity.source or JobSource.CONFIG),
        entity.config_error or "",
        bool(entity.deleted) or marked,
    )


def invocation_entity(row: InvocationRow, shards: int = INDEX_SHARDS) -> InvocationEntity:
    finished = row.status in TERMINAL
    return InvocationEntity(
        key=invocation_key(row.project, row.job_id, row.id),
        status=row.status,
        reason=row.reason,
        scheduled_time=row.scheduled_time,
        trigger=row.trigger,
        created_time=row.created_time,
        retention_key=sharded_time(row.project, row.job_id, row.created_time, shards) if finished else None,
        started_time=row.started_time,
        finished_time=row.finished_time,
        attempt=row.attempt,
        event_count=row.event_count,
        log=_json(row.log),
        notification=notification_text(row.notification),
    )


def invocation_row(entity: InvocationEntity) -> InvocationRow:
    project, job_id = split_job_name(entity.key.parent().id())
    invocation_id = entity.key.id()
    scheduled = entity.scheduled_time
    if scheduled is None:  # the id carries it: ids begin with the inverted scheduled time
        scheduled = datetime.fromtimestamp(scheduled_millis(invocation_id) / 1000, UTC)
    log = _loads(entity.log, [])
    return InvocationRow(
        project=project,
        job_id=job_id,
        id=invocation_id,
        status=entity.status or InvocationStatus.STARTING.value,
        scheduled_time=scheduled,
        trigger=entity.trigger or Trigger.SCHEDULE.value,
        reason=entity.reason or "",
        created_time=entity.created_time,
        started_time=entity.started_time,
        finished_time=entity.finished_time,
        attempt=entity.attempt or 0,
        event_count=entity.event_count or 1,
        log=log,
        notification=stored_notification(entity.notification, log),
    )


def audit_entity(entry: AuditEntry) -> AuditEntity:
    return AuditEntity(key=audit_key(entry.project, entry.job_id, entry.id), project=entry.project,
                       entry_id=entry.id, time=entry.time, actor=entry.actor, action=entry.action,
                       detail=_json(entry.detail))


def audit_row(entity: AuditEntity) -> AuditEntry:
    project, job_id = split_job_name(entity.key.parent().id())
    return AuditEntry(project, job_id, entity.key.id(), entity.time, entity.actor or "", entity.action or "",
                      _loads(entity.detail, {}))


def project_entity(row: ProjectRow) -> ProjectEntity:
    return ProjectEntity(
        key=project_key(row.id),
        config_hash=row.config_hash,
        config_error=row.config_error,
        job_errors=_json(row.job_errors),
        settings=_json(row.settings),
    )


def project_row(entity: ProjectEntity) -> ProjectRow:
    return ProjectRow(
        id=entity.key.id(),
        config_hash=entity.config_hash or "",
        config_error=entity.config_error or "",
        job_errors=_loads(entity.job_errors, []),
        settings=_loads(entity.settings, {}),
    )
