"""Production's size limits, checked before a write leaves for Datastore.

Firestore in Datastore mode refuses an entity over its limits, and the Datastore
emulator the tests mostly run on does not: it accepted a 1.2 MB property (cloud
review, defect 2). So the store measures each entity it is about to put and
refuses an oversized one itself, with an error that names the job and the size,
before anything of the transaction is written.

The limits, from "Firestore in Datastore mode limits"
(https://cloud.google.com/datastore/docs/concepts/limits):

- Maximum size for an entity: 1,048,572 bytes (1 MiB - 4 bytes).
- Maximum size for an unindexed property: 1,048,487 bytes (1 MiB - 89 bytes).

Sizes are counted as "Storage size calculations"
(https://cloud.google.com/datastore/docs/concepts/storage-size) counts them: a
string is its UTF-8 bytes + 1 (kind names, key names, property names, string
values); a key is its namespace string (if not the default), its path's strings
(integer ids 8 bytes each) and 16 bytes; a property is its name's string plus
its value (boolean 1, integer 8, float 8, timestamp 8, null 1, blob its length,
array the sum of its values); an entity is its key, its properties and 32 bytes.
The Firestore emulator counts the same way (measured: it refuses an entity at
exactly one byte over its own limit, 1,048,576), and the property limit is on the
value's bytes alone (1,048,487 accepted, 1,048,488 refused).

The number of entities in one commit: legacy Datastore took at most 500 ("Maximum
number of entities that can be passed to a Commit operation"), each put and each
delete counting as one; Firestore in Datastore mode and all three emulators take
more. The store refuses a larger commit itself (CommitTooLarge), so that a step that
outgrew its budget (statemachine/budget.py) shows in the tests. A Lookup takes at
most 1,000 keys.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from google.cloud import ndb

from engine.errors import CommitTooLarge, StoreError
from statemachine.budget import COMMIT_ENTITY_LIMIT

MAX_ENTITY_BYTES = 1_048_572
MAX_PROPERTY_BYTES = 1_048_487
MAX_LOOKUP_KEYS = 1_000


class EntityTooLarge(StoreError):
    """An entity over production's size limits: refused before the commit, so that
    nothing of its transaction is written (production would refuse the commit)."""

    def __init__(self, what: str, size: int, limit: int, part: str):
        self.what, self.size, self.limit, self.part = what, size, limit, part
        super().__init__(
            f"datastore: {what} is too large to store: {part} would be {size:,} bytes, over the"
            f" limit of {limit:,} bytes of Firestore in Datastore mode; nothing was written"
        )


def string_size(text: str) -> int:
    return len(text.encode("utf-8")) + 1


def key_size(key: ndb.Key) -> int:
    size = string_size(key.namespace()) if key.namespace() else 0
    for kind, identifier in key.pairs():
        size += string_size(kind)
        size += 8 if isinstance(identifier, int) else string_size(identifier)
    return size + 16


def value_size(value: object) -> int:
    if value is None or isinstance(value, bool):
        return 1
    if isinstance(value, (int, float, datetime)):
        return 8
    if isinstance(value, str):
        return string_size(value)
    if isinstance(value, bytes):
        return len(value)
    if isinstance(value, ndb.Key):
        return key_size(value)
    if isinstance(value, (list, tuple)):
        return sum(value_size(item) for item in value)
    raise TypeError(f"no documented storage size for a {type(value).__name__} value")


def describe(key: ndb.Key) -> str:
    """Who an entity belongs to, in the words of the API: the job, or its invocation."""
    pairs = key.pairs()
    if pairs[0][0] != "Job":
        return f"{pairs[-1][0]} {pairs[-1][1]}"
    job = f"job {pairs[0][1]}"
    return job if len(pairs) == 1 else f"{pairs[-1][0].lower()} {pairs[-1][1]} of {job}"


def entity_size(entity: ndb.Model) -> int:
    """The entity's size as Datastore counts it against MAX_ENTITY_BYTES."""
    values = entity.to_dict()
    properties = sum(string_size(name) + value_size(value) for name, value in values.items())
    return key_size(entity.key) + properties + 32


def check_size(entity: ndb.Model) -> None:
    """:raises EntityTooLarge: a property or the entity is over production's limit."""
    for name, value in entity.to_dict().items():
        if isinstance(value, (str, bytes)):
            size = len(value.encode("utf-8")) if isinstance(value, str) else len(value)
            if size > MAX_PROPERTY_BYTES:
                raise EntityTooLarge(describe(entity.key), size, MAX_PROPERTY_BYTES, f"its property {name!r}")
    size = entity_size(entity)
    if size > MAX_ENTITY_BYTES:
        raise EntityTooLarge(describe(entity.key), size, MAX_ENTITY_BYTES, f"its {entity.key.kind()} entity")


def check_count(writes: Mapping[ndb.Key, object]) -> None:
    """:raises CommitTooLarge: more entities (puts and deletes) than one commit takes."""
    if len(writes) > COMMIT_ENTITY_LIMIT:
        jobs = dict.fromkeys(key.pairs()[0][1] for key in writes if key.pairs()[0][0] == "Job")
        raise CommitTooLarge("datastore", list(jobs), len(writes))
