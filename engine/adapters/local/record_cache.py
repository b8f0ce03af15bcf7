"""Decoded job records and definitions by their stored text, for one SQLite store and
its transactions (sqlite_rows.py): what the hot path reads back it wrote a moment ago."""

from __future__ import annotations

import json
from typing import Generic, TypeVar

from engine.adapters.local.record_text import policy_text, record_text
from statemachine.definition import JobDefinition
from statemachine.policy import JobPolicy
from statemachine.record import JobRecord
from statemachine.record_form import record_from_dict, record_to_dict

# json.dumps builds an encoder per call when given options; the same text from one encoder.
compact = json.JSONEncoder(separators=(",", ":")).encode

K = TypeVar("K")
V = TypeVar("V")


class Generations(Generic[K, V]):
    """A bounded map that keeps what was used lately: entries go into the young
    generation, and when it holds `limit` the old one is dropped and the young becomes
    old; a hit in the old generation moves the entry back into the young. Cheaper than
    an LRU, and unlike clearing everything at the limit it never forgets what was put a
    moment ago (a staged attempt's record, read back at its time)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._young: dict[K, V] = {}
        self._old: dict[K, V] = {}

    def get(self, key: K) -> V | None:
        value = self._young.get(key)
        if value is None:
            value = self._old.get(key)
            if value is not None:
                self.put(key, value)
        return value

    def put(self, key: K, value: V) -> None:
        young = self._young
        young[key] = value
        if len(young) >= self.limit:
            self._old, self._young = young, {}


class RecordCache:
    """Decoded job records and definitions by their stored text, for one store and its
    transactions.

    A delivery reads its job twice (tick, outcome) and the second read finds the text
    this store just wrote; JobRecord and JobDefinition are frozen, so the cached ones
    can be handed out as they are (a definition's target specs are dicts shared by
    every reader: nothing may change one in place; rendering makes new ones). A
    definition read and written back unchanged is not encoded again either.
    """

    LIMIT = 4_096  # a few per task in flight; a miss only costs a decode

    def __init__(self) -> None:
        self._records: Generations[str, JobRecord] = Generations(self.LIMIT)
        # id of a record written lately -> it and its text (it is kept, so its id stays its own)
        self._written: Generations[int, tuple[JobRecord, str]] = Generations(self.LIMIT)
        self._definitions: dict[str, JobDefinition] = {}
        # id of a definition handed out -> it and its text (it is kept, so its id stays its own)
        self._definition_texts: dict[int, tuple[JobDefinition, str]] = {}
        # id of a policy -> it and its JSON: a job's policy object lives on through
        # every step of its chain, and is most of the record's text.
        self._policy_texts: dict[int, tuple[JobPolicy, str]] = {}

    def remember(self, text: str, record: JobRecord) -> None:
        self._records.put(text, record)

    def wrote(self, record: JobRecord, text: str) -> None:
        """`record` was just written as `text` (and so will be read back)."""
        self.remember(text, record)
        self._written.put(id(record), (record, text))

    def written_text(self, record: JobRecord) -> str | None:
        """The text `record` was written as lately, if this store wrote it."""
        known = self._written.get(id(record))
        return known[1] if known is not None and known[0] is record else None

    def decode(self, text: str) -> JobRecord:
        record = self._records.get(text)
        if record is None:
            record = record_from_dict(json.loads(text))
            self.remember(text, record)
        return record

    def decode_definition(self, text: str) -> JobDefinition:
        definition = self._definitions.get(text)
        if definition is None:
            definition = JobDefinition.from_dict(json.loads(text))
            self._remember_definition(text, definition)
        return definition

    def definition_text(self, definition: JobDefinition) -> str:
        known = self._definition_texts.get(id(definition))
        if known is not None and known[0] is definition:
            return known[1]
        text = definition.canonical_json  # encoded once already for its revision
        if not text.isascii():  # written as before: non-ASCII escaped, a lone surrogate too
            text = compact(definition.to_dict())
        self._remember_definition(text, definition)
        return text

    def record_text(self, record: JobRecord) -> str:
        """The record's stored text: `json.dumps(record_to_dict(record))` with compact
        separators, its policy's part encoded once per policy object."""
        policy = record.policy
        if policy is None:
            return record_text(record, "null") or compact(record_to_dict(record))
        known = self._policy_texts.get(id(policy))
        if known is None or known[0] is not policy:
            if len(self._policy_texts) >= self.LIMIT:
                self._policy_texts.clear()
            known = self._policy_texts[id(policy)] = (policy, policy_text(policy))
        text = record_text(record, known[1])  # spelled directly (record_text.py)
        if text is not None:
            return text
        text = compact(record_to_dict(record, with_policy=False))
        # The first `"policy":null` is the key's: only "version", "project", "job_id" and
        # "state" come before it, and a quote inside an encoded string is escaped.
        return text.replace('"policy":null', '"policy":' + known[1], 1)

    def _remember_definition(self, text: str, definition: JobDefinition) -> None:
        # Both maps bound: one definition text may be written from many objects.
        if len(self._definitions) >= self.LIMIT or len(self._definition_texts) >= self.LIMIT:
            self._definitions.clear()
            self._definition_texts.clear()
        self._definitions[text] = definition
        self._definition_texts[id(definition)] = (definition, text)
