"""The web UI's signed-in sessions (one machine with SUNDIAL_API_TOKENS).

A browser cannot send `Authorization: Bearer`, so /signin asks for an API token once.
The session cookie never holds that token: it holds a keyed digest of it (HMAC with
the app's session key) and the token's sign-out generation. Each request finds the
configured token whose digest matches, so a token removed from SUNDIAL_API_TOKENS stops
working at once, and a copied cookie reveals nothing that could be used elsewhere.

Signing out raises the token's generation, kept in the store beside the jobs: every
cookie issued for that token before then (a copy included, and after a restart too) no
longer signs anyone in. Sessions also end after SESSION_HOURS.

A request that a cookie authenticated and that changes something must also carry the
UI's CSRF token (the form field, or the `X-CSRF-Token` header for API calls): the
cookie alone is what a page on another site, or another port of this host, can make a
browser send.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from datetime import timedelta

from flask import current_app, request, session

from engine.ports import MetaStore
from web.context import current_engine
from web.identity import Caller, Identifier, Unauthenticated

SESSION_KEY = "sundial_signed_in"
SESSION_HOURS = 12
SESSION_LIFETIME = timedelta(hours=SESSION_HOURS)
CSRF_FIELD = "csrf_token"
CSRF_HEADER = "X-CSRF-Token"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


def token_digest(token: str) -> str:
    secret = current_app.secret_key or b""  # install_ui always sets one
    key = secret.encode() if isinstance(secret, str) else secret
    return hmac.new(key, b"ui session\0" + token.encode("utf-8", "surrogateescape"),
                    hashlib.sha256).hexdigest()


def sign_in(token: str) -> None:
    """Keep the session of `token`, already identified by the caller."""
    digest = token_digest(token)
    session.clear()  # a new session: nothing of a previous one carries over
    session.permanent = True
    session[SESSION_KEY] = {"token": digest, "generation": _generation(digest)}


def sign_out() -> None:
    """End this session and every other one of the same token (copies included)."""
    entry = session.get(SESSION_KEY)
    if isinstance(entry, dict) and isinstance(entry.get("token"), str):
        digest = entry["token"]
        _store().write_meta(_meta_key(digest), str(_generation(digest) + 1))
    session.clear()


def session_caller(identifier: Identifier) -> Caller | None:
    """The caller this request's session cookie signs in, None without one.

    :raises Unauthenticated: the session was signed out, or its token is no longer configured.
    """
    entry = session.get(SESSION_KEY)
    if not isinstance(entry, dict):
        return None
    digest, generation = entry.get("token"), entry.get("generation")
    if not isinstance(digest, str) or generation != _generation(digest):
        session.pop(SESSION_KEY, None)
        raise Unauthenticated("this session was signed out; sign in again")
    return identifier.by_token_digest(digest, token_digest)


def signed_in() -> bool:
    """Whether this browser holds a session (the page shows a Sign out button)."""
    return isinstance(session.get(SESSION_KEY), dict)


def csrf_token() -> str:
    """This session's CSRF token, made on first use (the hidden field of every form)."""
    token = session.get(CSRF_FIELD)
    if not token:
        token = session[CSRF_FIELD] = secrets.token_urlsafe(32)
    return token


def csrf_matches() -> bool:
    """Whether the request carries this session's CSRF token (form field or header)."""
    expected = session.get(CSRF_FIELD, "")
    sent = request.headers.get(CSRF_HEADER) or request.form.get(CSRF_FIELD, "")
    return bool(expected) and hmac.compare_digest(expected.encode(), sent.encode("utf-8", "surrogateescape"))


def _generation(digest: str) -> int:
    value = _store().read_meta(_meta_key(digest))
    return int(value) if value and value.isdigit() else 0


def _meta_key(digest: str) -> str:
    return f"ui_signout/{digest[:32]}"


def _store() -> MetaStore:
    return current_engine().meta
