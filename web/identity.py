"""Who is calling (docs/REFERENCE.md section 6): one `Caller` per API or UI request.

Three ways to prove an identity, tried in this order:

1. A bearer token listed in `SUNDIAL_API_TOKENS` (`token=user:email,...`): the
   one-machine way. Tokens are compared in constant time.
2. An Identity-Aware Proxy assertion (`X-Goog-IAP-JWT-Assertion`), when
   `SUNDIAL_IAP_AUDIENCE` is set: an ES256 JWT signed by IAP for that audience.
3. A Google ID token (`Authorization: Bearer <JWT>`) on App Engine, or wherever
   `SUNDIAL_ID_TOKEN_AUDIENCE` is set: signed by Google for that audience (on App
   Engine by default the service URL), with a verified email.

Every header is checked, never trusted: a credential that does not verify is
refused (401), whatever it claims. With no credential at all the caller is
`anonymous` on App Engine, refused (401) where API tokens are configured, and
otherwise — one machine, no tokens, which `serve` binds to loopback only — an
owner of everything (docs/REFERENCE.md section 6.1).
"""

from __future__ import annotations

import hmac
import json
import threading
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from config.settings import Settings
from web.guard import CertsRequest, RequestHeaders, default_certs_request

ANONYMOUS = "anonymous"
IAP_HEADER = "X-Goog-IAP-JWT-Assertion"
IAP_ISSUER = "https://cloud.google.com/iap"
IAP_CERTS_URL = "https://www.gstatic.com/iap/verify/public_key"
GOOGLE_ISSUERS = ("accounts.google.com", "https://accounts.google.com")
GOOGLE_CERTS_URL = "https://www.googleapis.com/oauth2/v1/certs"
CLOCK_SKEW_SECONDS = 10
KINDS = ("user", "group", "serviceAccount")


class Unauthenticated(Exception):
    """The request carries no identity that counts, where one is needed (401)."""


@dataclass(frozen=True)
class Caller:
    """`principal` is `user:EMAIL`, `serviceAccount:EMAIL` or `anonymous`;
    `open_access` marks the one-machine mode in which every caller is an owner."""

    principal: str
    open_access: bool = False

    @property
    def is_anonymous(self) -> bool:
        return self.principal == ANONYMOUS


OPEN = Caller("user:local-owner", open_access=True)


def principal_for_email(email: str) -> str:
    """Google identities carry only an email: a service account's ends in its suffix."""
    kind = "serviceAccount" if email.endswith(".gserviceaccount.com") else "user"
    return f"{kind}:{email.lower()}"


def parse_api_tokens(raw: str) -> dict[str, str]:
    """`token=user:email,token2=serviceAccount:x@y` -> {token: principal}; a malformed
    entry is an error naming SUNDIAL_API_TOKENS and the entry's position (never the token),
    and so is a value that holds no token at all (`,` or spaces): that must never mean
    "no tokens", which is open access."""
    tokens: dict[str, str] = {}
    for position, entry in enumerate((e.strip() for e in raw.split(",")), start=1):
        if not entry:
            continue
        token, sep, principal = entry.partition("=")
        kind, colon, name = principal.partition(":")
        if not sep or not token.strip() or kind not in ("user", "serviceAccount") or not colon or not name:
            raise ValueError(f"SUNDIAL_API_TOKENS entry {position}: expected TOKEN=user:EMAIL "
                             f"or TOKEN=serviceAccount:EMAIL")
        tokens[token.strip()] = f"{kind}:{name.strip().lower()}"
    if raw and not tokens:
        raise ValueError("SUNDIAL_API_TOKENS holds no token (only separators or spaces); "
                         "set TOKEN=user:EMAIL entries, or unset it for the loopback-only mode")
    return tokens


class JwtChecker:
    """Verifies a JWT against the public keys served at `certs_url` (a JSON map of key
    id to PEM certificate or public key, as Google and IAP publish them)."""

    def __init__(self, certs_url: str, audience: str, issuers: tuple[str, ...],
                 fetch: CertsRequest | None = None):
        self.certs_url, self.audience, self.issuers = certs_url, audience, issuers
        self._fetch = fetch
        self._lock = threading.Lock()

    def claims(self, token: str) -> dict[str, Any] | None:
        from google.auth import exceptions as auth_exceptions
        from google.auth import jwt

        try:
            claims: dict[str, Any] = jwt.decode(  # type: ignore[no-untyped-call]  # unannotated there
                token, certs=self._certs(), audience=self.audience, clock_skew_in_seconds=CLOCK_SKEW_SECONDS)
        except (ValueError, KeyError, TypeError, auth_exceptions.GoogleAuthError):
            return None  # bad signature, expired, wrong audience, malformed, keys out of reach
        return claims if claims.get("iss") in self.issuers else None

    def _certs(self) -> dict[str, str]:
        with self._lock:
            if self._fetch is None:
                self._fetch = default_certs_request()
            fetch = self._fetch
        response = fetch(self.certs_url, method="GET")
        if getattr(response, "status", None) != 200:
            raise ValueError(f"certificates unavailable from {self.certs_url}")
        certs: dict[str, str] = json.loads(response.data)  # key id -> PEM
        return certs


class Identifier:
    """Turns a request's headers into a Caller, or raises Unauthenticated."""

    def __init__(self, api_tokens: Mapping[str, str] | None = None, on_app_engine: bool = False,
                 iap: JwtChecker | None = None, id_tokens: JwtChecker | None = None):
        self._tokens = dict(api_tokens or {})
        self.on_app_engine = on_app_engine
        self._iap, self._id_tokens = iap, id_tokens

    @property
    def open_access(self) -> bool:
        """No identities configured anywhere: the one-machine mode (every caller an owner)."""
        return not (self._tokens or self.on_app_engine or self._iap or self._id_tokens)

    def identify(self, headers: RequestHeaders) -> Caller:
        if self.open_access:
            return OPEN
        assertion = headers.get(IAP_HEADER, "").strip()
        if assertion:
            return self._from_iap(assertion)
        scheme, _, credential = headers.get("Authorization", "").partition(" ")
        credential = credential.strip()
        if scheme.lower() == "bearer" and credential:
            return self._from_bearer(credential)
        if self._tokens:
            raise Unauthenticated("a bearer token is required (Authorization: Bearer TOKEN)")
        return Caller(ANONYMOUS)

    def by_token_digest(self, digest: str, token_digest: Callable[[str], str]) -> Caller:
        """The caller whose configured token has this digest (a UI session's cookie).

        :raises Unauthenticated: no configured token has it (any more).
        """
        for token, principal in self._tokens.items():
            if hmac.compare_digest(token_digest(token).encode(), digest.encode("utf-8", "surrogateescape")):
                return Caller(principal)
        raise Unauthenticated("the token this session signed in with is no longer configured")

    def _from_iap(self, assertion: str) -> Caller:
        claims = self._iap.claims(assertion) if self._iap else None
        if not claims or not claims.get("email"):
            raise Unauthenticated("the Identity-Aware Proxy assertion does not verify")
        return Caller(principal_for_email(claims["email"]))

    def _from_bearer(self, credential: str) -> Caller:
        given = credential.encode("utf-8", "surrogateescape")
        for token, principal in self._tokens.items():
            if hmac.compare_digest(given, token.encode("utf-8")):
                return Caller(principal)
        if self._id_tokens and credential.count(".") == 2:
            claims = self._id_tokens.claims(credential)
            if claims and claims.get("email") and claims.get("email_verified") is True:
                return Caller(principal_for_email(claims["email"]))
        raise Unauthenticated("the bearer token is not known or does not verify")


def identifier_from_settings(settings: Settings, fetch: CertsRequest | None = None) -> Identifier:
    """The running app's identifier. Audiences come from the settings:
    `SUNDIAL_IAP_AUDIENCE` (`/projects/NUMBER/apps/PROJECT_ID` behind IAP) and
    `SUNDIAL_ID_TOKEN_AUDIENCE` (default on App Engine: the service URL)."""
    try:
        tokens = parse_api_tokens(settings.api_tokens)
    except ValueError as error:
        raise SystemExit(str(error)) from None
    iap_audience = settings.iap_audience
    id_audience = settings.id_token_audience or (settings.service_url if settings.on_app_engine else "")
    iap = JwtChecker(settings.iap_certs_url or IAP_CERTS_URL, iap_audience, (IAP_ISSUER,),
                     fetch) if iap_audience else None
    id_tokens = JwtChecker(settings.id_certs_url or GOOGLE_CERTS_URL, id_audience,
                           GOOGLE_ISSUERS, fetch) if id_audience else None
    return Identifier(tokens, settings.on_app_engine, iap, id_tokens)
