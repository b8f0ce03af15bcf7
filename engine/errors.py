"""The shell's errors, one family under `statemachine.errors.SundialError`.

- `NotFound`: the project, job or invocation does not exist (or is not visible).
- `Refused`: a well-formed request that is not allowed; `code` names why in the API's
  words, because only the use cases (engine/operations.py) know which rule refused it.
- `StoreError` > `ConflictError`: storage failed, nothing was committed; retryable.

`RetryTask` (engine/ports.py) is not an error: it is how a task handler hands its task
back to the queue, and stays outside the family.
"""

from __future__ import annotations

from statemachine.errors import SundialError


class NotFound(SundialError):
    """The project, job or invocation does not exist."""


class Refused(SundialError):
    """The request is well-formed but not allowed; `code` is the API's error code."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code


class StoreError(SundialError):
    """Storage failed; the transaction did not commit and may be retried."""


class ConflictError(StoreError):
    """Another writer changed the data this transaction read; retry it."""
