"""The shell's errors, one family under `statemachine.errors.SundialError`.

- `NotFound`: the project, job or invocation does not exist (or is not visible).
- `Refused`: a well-formed request that is not allowed; `code` names why in the API's
  words, because only the use cases (engine/operations.py) know which rule refused it.
- `Refused` > `Busy`: too many writers of one job at once (engine/writers.py): 429.
- `StoreError` > `ConflictError`: storage failed, nothing was committed; retryable.
- `StoreError` > `CommitTooLarge`: a transaction would write more than one commit may.

`RetryTask` (engine/ports.py) is not an error: it is how a task handler hands its task
back to the queue, and stays outside the family.
"""

from __future__ import annotations

from statemachine.budget import COMMIT_ENTITY_LIMIT
from statemachine.errors import SundialError


class NotFound(SundialError):
    """The project, job or invocation does not exist."""


class Refused(SundialError):
    """The request is well-formed but not allowed; `code` is the API's error code."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code


class Busy(Refused):
    """Too many requests are changing the job at once; try again in `retry_after` seconds."""

    def __init__(self, message: str, retry_after: int):
        super().__init__("RESOURCE_EXHAUSTED", message)
        self.retry_after = retry_after


class StoreError(SundialError):
    """Storage failed; the transaction did not commit and may be retried."""


class ConflictError(StoreError):
    """Another writer changed the data this transaction read; retry it."""


class WriteLockBusy(StoreError):
    """The embedded database's write lock stayed taken past the bound a writer waits
    (engine/adapters/local/write_lock.py); nothing was written; retry in a moment."""


class CommitTooLarge(StoreError):
    """A transaction would write more entities than legacy Datastore takes in one
    commit (statemachine/budget.py). Every store refuses it before anything is
    written: the steps are bounded to fit, so this is a defect to report, not a load
    to retry into success."""

    def __init__(self, store: str, jobs: list[str], count: int):
        self.jobs, self.count = jobs, count
        whose = ("job " + ", ".join(jobs[:3]) + (f" and {len(jobs) - 3} more" if len(jobs) > 3 else "")
                 if jobs else "no job")
        super().__init__(
            f"{store}: a transaction of {whose} would write {count:,} entities, over the limit of"
            f" {COMMIT_ENTITY_LIMIT} entities in one commit (legacy Datastore's); nothing was written"
        )
