"""The root of Sundial's errors.

Every error a request may end with on purpose derives from `SundialError`, so the
web layer maps exceptions to answers with one table (web/errors.classify). It lives
in the pure core because the core's own refusal (`InvalidTransition`) is one of them;
the shell's (NotFound, Refused, StoreError) are in engine/errors.py.
"""


class SundialError(Exception):
    """An error Sundial raises on purpose; anything else reaching a handler is a bug."""
