"""How the Datastore adapter calls Datastore: in an ndb context, with Google's failures
turned into the port's, and the one value read before any store exists (the shared
task secret, which the task queue a store is built with needs first)."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Callable, Iterator

import grpc
from google.api_core import exceptions as api_errors
from google.cloud import ndb

from engine.adapters.cloud.datastore_entities import MetaEntity, meta_key
from engine.ports import ConflictError, StoreError


@contextmanager
def storage_errors(what: str) -> Iterator[None]:
    """Turn Datastore's failures into the port's: ConflictError for lost races, else StoreError."""
    try:
        yield
    except api_errors.RetryError as error:  # ndb's retries ran out; the cause is the last failure
        if isinstance(error.cause, api_errors.Aborted):
            raise ConflictError(f"datastore: {what}: contention persisted: {error.cause}") from error
        raise StoreError(f"datastore: {what}: {error.cause or error}") from error
    except api_errors.Aborted as error:
        raise ConflictError(f"datastore: {what}: {error}") from error
    except (api_errors.GoogleAPICallError, grpc.RpcError) as error:
        raise StoreError(f"datastore: {what}: {error}") from error


@contextmanager
def ndb_context(client: ndb.Client) -> Iterator[None]:
    """An ndb context for this thread, or the one already open in it."""
    if ndb.get_context(False) is not None:
        yield
        return
    with client.context(cache_policy=False, global_cache_policy=False):
        yield


def read_shared_secret(client: ndb.Client, generate: Callable[[], str], retries: int = 3) -> str:
    """The secret every process on this Datastore puts on the tasks it creates (made by
    `generate` the first time). A function of the client, not of a store, because the
    task queue a store is built with needs it first.

    :raises StoreError: Datastore is failing.
    """
    def body() -> str:
        entity = meta_key("task_secret").get()
        if entity is not None and entity.value:
            return str(entity.value)
        secret = generate()
        MetaEntity(key=meta_key("task_secret"), value=secret).put()
        return secret

    with ndb_context(client), storage_errors("shared secret"):
        return str(ndb.transaction(body, retries=retries))
