"""Local stand-ins for the two Google services `auth` targets mint tokens through, and a
receiver that checks the tokens it gets, all real HTTP servers on 127.0.0.1.

- `MetadataServer`: the metadata server's paths for the default service account
  (`email`, `identity?audience=`, `token?scopes=`), refusing any request without
  `Metadata-Flavor: Google` as the real one does.
- `IamCredentials`: `generateIdToken` and `generateAccessToken`, for the accounts the test
  lets the runtime impersonate; the caller must present an access token of the runtime.
- `Verifier`: an HTTP receiver that checks each bearer token's signature with the test's
  public key, and its audience (its origin or its URL; or the scope), email and expiry.

Every token, the access tokens too, is a JWT signed with an RSA key made for the test,
so the receiver can tell a real one from anything else. `lifetime` and `fail` let a
test make tokens near their expiry or make minting fail.
"""

from __future__ import annotations

import functools
import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlsplit

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from google.auth import crypt, jwt

ISSUER = "https://accounts.google.com"


class Keys:
    """An RSA key pair made for one test run."""

    def __init__(self) -> None:
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.private_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                             serialization.NoEncryption()).decode()
        self.public_pem = key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        self._signer = crypt.RSASigner.from_string(self.private_pem, key_id="test-key")

    def token(self, claims: dict, lifetime: float) -> str:
        now = int(time.time())
        body = {"iss": ISSUER, "iat": now, "exp": now + int(lifetime), **claims}
        return jwt.encode(self._signer, body).decode()

    def claims(self, token: str, audience: str | list[str] | None = None) -> dict:
        """The claims of a token signed by this key; raises ValueError if it is not one."""
        return jwt.decode(token, certs=self.public_pem, audience=audience)


@functools.lru_cache(maxsize=1)
def shared_keys() -> Keys:
    """One key pair for a whole test run: making one takes a noticeable fraction of a second."""
    return Keys()


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, handler) -> None:
        super().__init__(("127.0.0.1", 0), handler)
        # A short poll interval: shutdown() waits for it, once per server and test.
        self.thread = threading.Thread(target=self.serve_forever, args=(0.02,), daemon=True)
        self.thread.start()

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.server_address[1]}"

    def close(self) -> None:
        self.shutdown()
        self.server_close()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def answer(self, code: int, body: str, content_type: str = "text/plain") -> None:
        data = body.encode()
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        if isinstance(self.server, MetadataServer):
            self.send_header("Metadata-Flavor", "Google")
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args) -> None:
        pass


class MetadataServer(_Server):
    """The metadata server of a runtime whose own account is `email`."""

    def __init__(self, keys: Keys, email: str, lifetime: float = 3600) -> None:
        self.keys, self.email, self.lifetime = keys, email, lifetime
        self.fail: int | None = None  # answer minting requests with this status
        self.hits: list[str] = []  # paths (with query) of the accepted requests
        super().__init__(_MetadataHandler)

    def minted(self) -> list[str]:
        return [hit for hit in self.hits if "/identity" in hit or "/token" in hit]


class _MetadataHandler(_Handler):
    server: MetadataServer

    def do_GET(self) -> None:
        if self.headers.get("Metadata-Flavor") != "Google":
            return self.answer(403, "Missing Metadata-Flavor:Google header.")
        parts = urlsplit(self.path)
        query = {name: values[0] for name, values in parse_qs(parts.query).items()}
        base = "/computeMetadata/v1/instance/service-accounts/default/"
        if not parts.path.startswith(base):
            return self.answer(404, "not found")
        self.server.hits.append(self.path)
        what, keys, life = parts.path[len(base):], self.server.keys, self.server.lifetime
        if what == "email":
            return self.answer(200, self.server.email)
        if self.server.fail is not None:
            return self.answer(self.server.fail, "metadata server says no")
        if what == "identity" and query.get("audience"):
            return self.answer(200, keys.token({"aud": query["audience"], "email": self.server.email,
                                                "sub": "1"}, life))
        if what == "token":
            token = keys.token({"aud": "access", "email": self.server.email,
                                "scope": query.get("scopes", "").replace(",", " ")}, life)
            return self.answer(200, json.dumps({"access_token": token, "expires_in": int(life),
                                                "token_type": "Bearer"}), "application/json")
        return self.answer(400, "bad request")


class IamCredentials(_Server):
    """IAM Credentials for a runtime `caller` allowed to impersonate `grants`."""

    def __init__(self, keys: Keys, caller: str, grants: set[str], lifetime: float = 3600) -> None:
        self.keys, self.caller, self.grants, self.lifetime = keys, caller, grants, lifetime
        self.hits: list[tuple[str, dict]] = []
        super().__init__(_IamHandler)

    @property
    def url(self) -> str:
        return f"http://{self.host}"

    def key_file(self, path) -> str:
        """An Application Default Credentials file of the runtime's account (a service
        account key) whose token_uri is this stand-in."""
        path.write_text(json.dumps({
            "type": "service_account", "project_id": "p", "private_key_id": "test-key",
            "private_key": self.keys.private_pem, "client_email": self.caller,
            "client_id": "1", "token_uri": f"{self.url}/token"}))
        return str(path)


class _IamHandler(_Handler):
    server: IamCredentials

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.path == "/token":
            return self._grant(raw)
        body = json.loads(raw or b"{}")
        try:
            caller = self.server.keys.claims(self.headers.get("Authorization", "")[len("Bearer "):], "access")
        except ValueError:
            return self._error(401, "Request had invalid authentication credentials.")
        path = unquote(urlsplit(self.path).path)
        prefix = "/v1/projects/-/serviceAccounts/"
        account, _, method = path[len(prefix):].partition(":")
        self.server.hits.append((path, body))
        if caller.get("email") != self.server.caller or account not in self.server.grants:
            return self._error(403, f"Permission 'iam.serviceAccounts.getOpenIdToken' denied on {account}")
        keys, life = self.server.keys, self.server.lifetime
        if method == "generateIdToken":
            token = keys.token({"aud": body["audience"], "email": account, "sub": "2"}, life)
            return self.answer(200, json.dumps({"token": token}), "application/json")
        if method == "generateAccessToken":
            token = keys.token({"aud": "access", "email": account, "scope": " ".join(body["scope"])}, life)
            expire = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + life))
            return self.answer(200, json.dumps({"accessToken": token, "expireTime": expire}), "application/json")
        return self._error(404, "no such method")

    def _grant(self, raw: bytes) -> None:
        """OAuth's token endpoint for a service-account key (a JWT assertion signed by it),
        as `token_uri` of an Application Default Credentials file names it."""
        form = {name: values[0] for name, values in parse_qs(raw.decode()).items()}
        try:
            # google-auth signs the assertion for Google's own token URI, wherever it posts it.
            assertion = self.server.keys.claims(form.get("assertion", ""), "https://oauth2.googleapis.com/token")
        except ValueError as error:
            return self._error(400, f"invalid_grant: {error}")
        self.server.hits.append(("/token", {"iss": assertion["iss"]}))
        token = self.server.keys.token({"aud": "access", "email": assertion["iss"],
                                        "scope": assertion.get("scope", "")}, self.server.lifetime)
        self.answer(200, json.dumps({"access_token": token, "expires_in": int(self.server.lifetime),
                                     "token_type": "Bearer"}), "application/json")

    def _error(self, code: int, message: str) -> None:
        self.answer(code, json.dumps({"error": {"code": code, "message": message}}), "application/json")


@dataclass
class Checked:
    path: str
    authorization: str
    claims: dict | None  # None: the token did not verify
    error: str = ""


class Verifier(_Server):
    """A receiver that answers 200 to a valid token and 401 to anything else."""

    def __init__(self, keys: Keys) -> None:
        self.keys = keys
        self.checked: list[Checked] = []
        self.lock = threading.Lock()
        super().__init__(_VerifierHandler)

    @property
    def url(self) -> str:
        return f"http://{self.host}"

    def tokens(self) -> list[str]:
        return [check.authorization[len("Bearer "):] for check in self.checked]


class _VerifierHandler(_Handler):
    server: Verifier

    def _serve(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        given = self.headers.get("Authorization", "")
        path = urlsplit(self.path).path
        # An OIDC token's audience: this receiver's origin (the default), or its URL with the path.
        expected = ["access"] if path.startswith("/access") else [self.server.url, f"{self.server.url}{path}"]
        try:
            claims = self.server.keys.claims(given[len("Bearer "):], expected)
            check = Checked(self.path, given, claims)
        except ValueError as error:
            check = Checked(self.path, given, None, str(error))
        with self.server.lock:
            self.server.checked.append(check)
        self.answer(200 if check.claims else 401, "ok" if check.claims else "bad token")

    do_GET = do_POST = _serve


@dataclass
class Google:
    """The metadata server, IAM Credentials and a verifying receiver of one test."""

    own: str = "runtime@p.iam.gserviceaccount.com"
    other: str = "target@p.iam.gserviceaccount.com"
    keys: Keys = field(default_factory=lambda: shared_keys())

    def __post_init__(self) -> None:
        self.metadata = MetadataServer(self.keys, self.own)
        self.iam = IamCredentials(self.keys, self.own, {self.other})
        self.receiver = Verifier(self.keys)

    def close(self) -> None:
        for server in (self.metadata, self.iam, self.receiver):
            server.close()
