"""Google-signed tokens for targets with `auth` (docs/REFERENCE.md section 2.3): an OIDC
ID token with an audience, or an OAuth access token with scopes, for a service account.

Where a token comes from:
- the runtime's own account (the email the metadata server reports for `default`):
  the metadata server's `identity?audience=` or `token?scopes=`;
- any other account: the IAM Credentials API (`generateIdToken`, `generateAccessToken`),
  called with the runtime's own access token, which comes from the metadata server, or
  off Google Cloud from the Application Default Credentials file
  (GOOGLE_APPLICATION_CREDENTIALS or `gcloud auth application-default login`).
  google-auth's `impersonated_credentials` would do the same calls, but its ID-token
  endpoint is fixed, so a private endpoint or a test's stand-in could not be named.

What must stay true:
- Nothing is minted for an account the operator has not granted to the target's
  project, nor for an audience naming Sundial's own service or off the target URL's
  origin without a grant (statemachine/identities.py, checked again here whatever
  validation said: a grant may have changed since, and a stored job is not re-read).
  Such an attempt fails with a reason starting `forbidden identity`.
- A token is kept in memory only, per (kind, account, audience or scope), and reused
  until REFRESH_MARGIN before it expires (at most MAX_TOKENS of them); it never reaches the store, a log line or an
  error text. Two attempts needing the same token wait for one mint, not two.
- The metadata server is link-local: it is reached here, through google-auth, never
  through the target's address checks (which still apply to the target's own URL).
- A mint that fails raises MintError with a reason for the attempt, `auth: cannot mint
  OIDC token for sa@P...: 403 ...`; the attempt fails and is retried like any other.
"""

from __future__ import annotations

import json
import threading
import time
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any, Callable, Mapping
from urllib.parse import quote

from statemachine.identities import origin_text
from statemachine.safety import OwnService

if TYPE_CHECKING:  # google-auth and requests load on the first mint
    import requests  # type: ignore[import-untyped]  # no stubs installed; google-auth uses it too
    from google.auth.credentials import Credentials
    from google.auth.transport.requests import Request

REFRESH_MARGIN = timedelta(minutes=5)
CLOUD_PLATFORM = "https://www.googleapis.com/auth/cloud-platform"
DEFAULT_METADATA_HOST = "metadata.google.internal"
DEFAULT_IAM_URL = "https://iamcredentials.googleapis.com"
# The package installs google-auth only with its `gcp` extra; a target with `auth` says so.
INSTALL_THE_GCP_EXTRA = "pip install 'sundial-scheduler[gcp]'"
MAX_TOKENS = 1000  # kept at once; a templated URL makes one audience per rendered path
NOT_ON_GCE_FOR = 300.0  # seconds before a metadata server that did not answer is asked again
TIMEOUT = 10.0  # seconds for one call to the metadata server or IAM Credentials
_LIFETIME = "3600s"  # of an access token from IAM Credentials (its maximum by default)


class MintError(Exception):
    """A token could not be minted; str() is the attempt's reason (`auth: ...`)."""


class ForbiddenIdentity(MintError):
    """The target's project may not have this token: nothing was minted. str() is the
    attempt's reason (`forbidden identity: ...`)."""


def default_audience(url: str) -> str:
    """The audience of an OIDC token whose `auth` names none: the target URL's origin
    (`https://svc.example`), what Cloud Run and most receivers expect."""
    return origin_text(url)


def refusal(own: OwnService, project: str, auth: Mapping[str, Any], url: str) -> str | None:
    """The attempt's reason (`forbidden identity: ...`) when a target of `project` at
    `url` may not carry the token `auth` asks for, else None."""
    kind = next(iter(auth), "")
    spec = auth.get(kind) or {}
    refused = own.identity_refusal(project, kind, str(spec.get("service_account") or ""),
                                   str(spec.get("audience") or ""), url)
    return f"forbidden identity: {refused[0]}: {refused[1]}" if refused else None


def describe(auth: Mapping[str, Any], url: str) -> tuple[str, str, str]:
    """(kind, account, audience or scope) of an `auth` spec for a target URL."""
    kind = next(iter(auth), "")
    spec = auth.get(kind) or {}
    account = str(spec.get("service_account") or "")
    if kind == "oidc":
        return kind, account, str(spec.get("audience") or default_audience(url))
    return kind, account, " ".join(str(spec.get("scope") or CLOUD_PLATFORM).split())


class TokenMinter:
    """Mints and caches tokens; one per process, shared by every delivery thread."""

    def __init__(self, metadata_host: str = DEFAULT_METADATA_HOST, iam_url: str = DEFAULT_IAM_URL,
                 credentials_file: str = "", clock: Callable[[], float] = time.time,
                 max_tokens: int = MAX_TOKENS, own: OwnService = OwnService()) -> None:
        self._metadata_root = f"http://{metadata_host or DEFAULT_METADATA_HOST}/computeMetadata/v1/"
        self._iam_url = (iam_url or DEFAULT_IAM_URL).rstrip("/")
        self._credentials_file = credentials_file
        self._clock = clock
        self._max_tokens = max_tokens
        self._lock = threading.Lock()
        self._tokens: dict[tuple[str, str, str], tuple[str, float]] = {}
        self._key_locks: dict[tuple[str, str, str], threading.Lock] = {}
        self._runtime: tuple[str, float] | None = None  # (email or "", asked at)
        self._file_credentials: Credentials | None = None
        self._session: requests.Session | None = None
        self._own = own  # Sundial's own service, and the identities it grants each project

    def bearer(self, auth: Mapping[str, Any], url: str, project: str) -> str:
        """A valid token for `auth` ({oidc: {...}} or {oauth: {...}}) of a target of
        `project` at `url`, checked against the operator's grant first.

        :raises ForbiddenIdentity: the project may not have it; nothing was minted.
        :raises MintError: with the attempt's reason.
        """
        key = describe(auth, url)
        if key[0] not in ("oidc", "oauth") or not key[1]:
            raise MintError(f"auth: not an oidc or oauth spec: {sorted(auth)}")
        refused = refusal(self._own, project, auth, url)
        if refused:
            raise ForbiddenIdentity(refused)
        return self._cached(key, lambda: self._mint(*key))

    def _cached(self, key: tuple[str, str, str], mint: Callable[[], tuple[str, float]]) -> str:
        with self._lock:
            key_lock = self._key_locks.setdefault(key, threading.Lock())
        with key_lock:
            found = self._tokens.get(key)
            if found and self._clock() < found[1] - REFRESH_MARGIN.total_seconds():
                return found[0]
            token, expires = mint()
            with self._lock:  # inside the key's lock: a thread waiting on it finds this token
                self._tokens[key] = (token, expires)
                if len(self._tokens) > self._max_tokens:
                    self._forget_soonest_expiring()
            return token

    def _forget_soonest_expiring(self) -> None:
        """Keep the cache bounded: drop the half of the tokens that expire first (and
        their locks; a thread holding one just mints without the others waiting)."""
        by_expiry = sorted(self._tokens, key=lambda key: self._tokens[key][1])
        for key in by_expiry[: len(by_expiry) // 2 + 1]:
            del self._tokens[key]
            self._key_locks.pop(key, None)

    def _mint(self, kind: str, account: str, aim: str) -> tuple[str, float]:
        what = "OIDC" if kind == "oidc" else "OAuth"
        try:
            from google.auth import exceptions as auth_exceptions
        except ImportError:
            raise MintError(f"auth: cannot mint {what} token for {account}: google-auth is not installed"
                            f" ({INSTALL_THE_GCP_EXTRA})") from None
        try:
            if account == self._own_email():
                return self._from_metadata(kind, aim)
            return self._from_iam(kind, account, aim)
        except MintError as error:
            raise MintError(f"auth: cannot mint {what} token for {account}: {error}") from None
        except (auth_exceptions.GoogleAuthError, OSError, ValueError, KeyError) as error:
            raise MintError(f"auth: cannot mint {what} token for {account}: {_short(error)}") from None

    # --- the metadata server ------------------------------------------------------

    def _own_email(self) -> str:
        """The runtime's own account, or "" off Google Cloud (asked again after a while)."""
        from google.auth import exceptions as auth_exceptions

        now = self._clock()
        known = self._runtime
        if known is not None and (known[0] or now - known[1] < NOT_ON_GCE_FOR):
            return known[0]
        try:
            email = str(_metadata_get(self._request(), "instance/service-accounts/default/email",
                                      root=self._metadata_root, retry_count=1, timeout=TIMEOUT))
        except auth_exceptions.TransportError:
            email = ""
        self._runtime = (email.strip(), now)
        return email.strip()

    def _from_metadata(self, kind: str, aim: str) -> tuple[str, float]:
        base = "instance/service-accounts/default/"
        if kind == "oidc":
            token = str(_metadata_get(self._request(), base + "identity", root=self._metadata_root,
                                      params={"audience": aim, "format": "full"}, timeout=TIMEOUT))
            return token, _expiry_of(token)
        answer = _metadata_get(self._request(), base + "token", root=self._metadata_root,
                               params={"scopes": ",".join(aim.split())}, timeout=TIMEOUT)
        return str(answer["access_token"]), self._clock() + float(answer["expires_in"])

    # --- IAM Credentials ----------------------------------------------------------

    def _from_iam(self, kind: str, account: str, aim: str) -> tuple[str, float]:
        if kind == "oidc":
            answer = self._iam_call(account, "generateIdToken", {"audience": aim, "includeEmail": True})
            token = str(answer["token"])
            return token, _expiry_of(token)
        answer = self._iam_call(account, "generateAccessToken", {"scope": aim.split(), "lifetime": _LIFETIME})
        return str(answer["accessToken"]), _rfc3339_seconds(str(answer["expireTime"]))

    def _iam_call(self, account: str, method: str, body: dict[str, object]) -> dict[str, Any]:
        url = f"{self._iam_url}/v1/projects/-/serviceAccounts/{quote(account, safe='@')}:{method}"
        headers = {"Authorization": f"Bearer {self._runtime_token()}", "Content-Type": "application/json"}
        response = self._http().post(url, data=json.dumps(body), headers=headers, timeout=TIMEOUT,
                                     allow_redirects=False)
        if response.status_code != 200:
            raise MintError(f"{response.status_code} {_short(_error_text(response))} (IAM Credentials {method})")
        answer: dict[str, Any] = response.json()
        return answer

    def _runtime_token(self) -> str:
        """The runtime's own access token, which IAM Credentials is called with."""
        own = self._own_email()
        if own:
            return self._cached(("oauth", own, CLOUD_PLATFORM),
                                lambda: self._from_metadata("oauth", CLOUD_PLATFORM))
        if not self._credentials_file:
            raise MintError("no Google credentials here: no metadata server answered, and there is "
                            "neither GOOGLE_APPLICATION_CREDENTIALS nor `gcloud auth application-default login`")
        return self._cached(("adc", self._credentials_file, CLOUD_PLATFORM), self._from_file)

    def _from_file(self) -> tuple[str, float]:
        import google.auth

        if self._file_credentials is None:
            # The file found is the one default() reads first (GOOGLE_APPLICATION_CREDENTIALS,
            # else gcloud's), so it does not go on to ask a metadata server.
            self._file_credentials, _ = google.auth.default(scopes=[CLOUD_PLATFORM])
        credentials = self._file_credentials
        credentials.refresh(self._request())  # type: ignore[no-untyped-call]  # unannotated in google-auth
        expiry = credentials.expiry  # naive UTC in google-auth
        return str(credentials.token), _utc_seconds(expiry) if expiry else self._clock()

    # --- transport ----------------------------------------------------------------

    def _http(self) -> requests.Session:
        """One requests session that reads no proxy or netrc settings from the environment."""
        import requests  # no stubs: the ignore is on the TYPE_CHECKING import above

        with self._lock:
            if self._session is None:
                self._session = requests.Session()
                self._session.trust_env = False
            return self._session

    def _request(self) -> Request:
        from google.auth.transport.requests import Request

        return Request(self._http())


def _rfc3339_seconds(text: str) -> float:
    """`2026-01-01T10:00:00Z` or with fractional seconds, as epoch seconds."""
    whole = text.rstrip("Z").split(".", 1)[0]
    return _utc_seconds(datetime.strptime(whole, "%Y-%m-%dT%H:%M:%S"))


def _utc_seconds(moment: datetime) -> float:
    """Epoch seconds of a naive UTC datetime (google-auth's and strptime's)."""
    return moment.replace(tzinfo=timezone.utc).timestamp()


def _error_text(response: requests.Response) -> str:
    try:
        error = response.json().get("error", {})
        return str(error.get("message") or error) if isinstance(error, dict) else str(error)
    except ValueError:
        return str(response.text)


def _metadata_get(request: Request, path: str, **options: Any) -> Any:
    """google-auth's read of the metadata server: its text, or its JSON parsed."""
    from google.auth.compute_engine import _metadata

    return _metadata.get(request, path, **options)  # type: ignore[no-untyped-call]  # unannotated in google-auth


def _expiry_of(token: str) -> float:
    """The `exp` of an ID token Google just handed over (its signature is not checked:
    it is ours to send, not to trust)."""
    from google.auth import jwt

    return float(jwt.decode(token, verify=False)["exp"])  # type: ignore[no-untyped-call]  # unannotated in google-auth


def _short(error: object) -> str:
    return " ".join(str(error).split())[:200] or type(error).__name__
