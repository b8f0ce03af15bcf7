"""The API's page tokens: opaque to callers, and checked when they come back.

A list is read by keyset (the stores page after the last id of the previous page), so
any string would do as a position, and a token the server never issued (garbled,
truncated, or another list's) would quietly answer an empty or wrong page with 200.
A token is therefore the position together with a digest of the list it belongs to
(its kind, project and job) and the position itself; one whose digest does not match
is a 400 INVALID_ARGUMENT. The digest is not a secret: it tells a mistake from a
token, and a caller who forges one only pages, from where it chose, through a list it
may read anyway.
"""

from __future__ import annotations

import base64
import binascii
import hashlib

from web.errors import ApiError

_VERSION = "p1"


def issue(scope: str, position: str | None) -> str | None:
    """The token that resumes the list `scope` after `position`; None at its end."""
    if position is None:
        return None
    encoded = base64.urlsafe_b64encode(position.encode("utf-8")).decode("ascii").rstrip("=")
    return f"{_VERSION}.{encoded}.{_digest(scope, position)}"


def position(scope: str, token: str | None) -> str | None:
    """The position a token of the list `scope` stands for; None for none (the first page).

    :raises ApiError: INVALID_ARGUMENT, for a token this list never issued.
    """
    if not token:
        return None
    version, _, rest = token.partition(".")
    encoded, _, digest = rest.partition(".")
    try:
        decoded = base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4)).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError, ValueError):
        decoded = None
    if version != _VERSION or decoded is None or digest != _digest(scope, decoded):
        raise ApiError("INVALID_ARGUMENT", f"page_token {token[:60]!r} is not a token of this list: "
                                           "pass next_page_token from its previous page, or none")
    return decoded


def _digest(scope: str, position: str) -> str:
    return hashlib.blake2b(f"{scope}\n{position}".encode("utf-8"), digest_size=8).hexdigest()
