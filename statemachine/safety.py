"""What a project may not make Sundial send or call (docs/REFERENCE.md section 6), decided once.

Validation (config/targets.py) and delivery (engine/targets/) both ask these functions,
so a rule cannot be tightened in one place and forgotten in the other. Pure: the
standard library only.

- Framing and hop-by-hop headers belong to the connection, not to one project's
  request: a user `Content-Length` on a pooled keep-alive connection would let one
  project's body become the start of the next project's request.
- Credential headers are dropped when a redirect leaves the host they were meant for.
- What a reader is shown of a definition or of an attempt's request and answer: every
  literal header value but HARMLESS_HEADERS', the credential-like values of a URL's
  query and its user:password masked, and every credential an attempt sent masked
  wherever its answer echoes it (`masked_url`, `sent_credentials`, `redact_echoes`).
- A `cloud_tasks` target may not create tasks on Sundial's own service or queues, nor
  tasks larger than Cloud Tasks accepts (its CreateTask reference: 100 KB).
- An address is refused when it reaches the platform (link-local, the metadata
  server) on every backend, and on the cloud backend anything that is not the public
  internet, including the IPv6 forms that carry an IPv4 address inside them.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass, field
from typing import Iterable, Mapping
from urllib.parse import unquote, unquote_plus

from statemachine.identities import IdentityRules, ServiceNames, host_of, origin
from statemachine.shards import is_chain_queue

# Set by Sundial or by the HTTP client for the connection, never by a target.
FRAMING_HEADERS = frozenset({
    "content-length", "transfer-encoding", "connection", "keep-alive", "te", "trailer",
    "upgrade", "host",
})
# Headers whose values are credentials even when written out in the config: not sent on
# when a redirect leaves the host (engine/targets/http.py).
SENSITIVE_HEADERS = frozenset({"authorization", "proxy-authorization", "cookie", "x-api-key"})
COMPLETION_TOKEN_HEADER = "X-Sundial-Completion-Token"

# What a reader is shown in place of a credential.
MASK = "<redacted>"
# The headers whose literal values a reader is shown: they describe the request's content,
# its client or its tracing, and no service takes them as proof of anything. Any other
# header may be a credential under a name nobody can list (X-Auth-Token, Private-Token,
# X-My-Secret...), so its value is masked.
HARMLESS_HEADERS = frozenset({
    "accept", "accept-charset", "accept-encoding", "accept-language", "cache-control",
    "content-encoding", "content-language", "content-type", "idempotency-key", "pragma",
    "traceparent", "tracestate", "user-agent",
})
# A URL query parameter whose name contains one of these (any case) carries a credential
# (api_key, access_token, X-Amz-Signature, sig, client_secret, password, ...): a few
# harmless names match too, which costs only their values being masked.
CREDENTIAL_QUERY_WORDS = ("key", "token", "auth", "sig", "pass", "pwd", "secret", "credential",
                          "session", "jwt")
# A sent value shorter than this is not masked in an answer: a secret is longer, and
# masking every "1" or "json" would leave nothing of the answer to read.
ECHO_MIN_CHARS = 8
_PARTIAL_CHARS = 4  # the shortest beginning of a credential masked at the end of a cut text
_SUNDIAL_PREFIX = "x-sundial-"  # Sundial's own headers: names and ids, not credentials

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

# Where IPv6 carries an IPv4 address that the network may route to (RFC 6052, 3056).
_NAT64 = (ipaddress.ip_network("64:ff9b::/96"), ipaddress.ip_network("64:ff9b:1::/48"))
_SIX_TO_FOUR = ipaddress.ip_network("2002::/16")
_GLOBAL_UNICAST = ipaddress.ip_network("2000::/3")
_IPV4_COMPATIBLE = ipaddress.ip_network("::/96")  # ::a.b.c.d, deprecated but parsed
_IPV4_TRANSLATED = ipaddress.ip_network("::ffff:0:0:0/96")  # ::ffff:0:a.b.c.d (SIIT)

# The largest task a `cloud_tasks` target may create, as Cloud Tasks counts it (100 KB).
CLOUD_TASK_MAX_BYTES = 100_000


def is_framing_header(name: str) -> bool:
    """Whether a target may not set header `name` (any case)."""
    lower = name.lower()
    return lower in FRAMING_HEADERS or lower.startswith("proxy-")


def is_credential_header(name: str) -> bool:
    """Whether header `name` is dropped when a redirect leaves its host."""
    return name.lower() in SENSITIVE_HEADERS


def shows_header_value(name: str) -> bool:
    """Whether a reader is shown the literal value of header `name` (HARMLESS_HEADERS)."""
    return name.lower() in HARMLESS_HEADERS


def is_credential_query_name(name: str) -> bool:
    """Whether a URL query parameter named `name` (as written, percent-encoded or not)
    carries a credential: its name contains a CREDENTIAL_QUERY_WORDS word, any case."""
    lower = unquote_plus(name).lower()
    return any(word in lower for word in CREDENTIAL_QUERY_WORDS)


# scheme://userinfo@ (only after a scheme), the rest up to the query, ?query, #fragment.
_URL_PARTS = re.compile(r"(?:(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)(?P<userinfo>[^@/?#]*@)?)?"
                        r"(?P<path>[^?#]*)(?P<query>\?[^#]*)?(?P<fragment>#.*)?", re.DOTALL)


def masked_url(url: str) -> str:
    """`url` as a reader is shown it: the password of its `user:password@` (or a lone
    `token@`) and the value of every credential-like query parameter as MASK. Anything
    else is kept as written, templates included; masking twice changes nothing."""
    parts = _URL_PARTS.fullmatch(url)
    if parts is None:  # the pattern matches any text; kept for the type checker
        return url
    userinfo, query = parts["userinfo"] or "", parts["query"] or ""
    if userinfo:
        user, colon, _ = userinfo[:-1].partition(":")
        userinfo = f"{user}:{MASK}@" if colon else f"{MASK}@"
    if query:
        query = "?" + "&".join(_masked_pair(pair) for pair in query[1:].split("&"))
    return (parts["scheme"] or "") + userinfo + parts["path"] + query + (parts["fragment"] or "")


def _masked_pair(pair: str) -> str:
    name, equals, value = pair.partition("=")
    return f"{name}={MASK}" if equals and value and is_credential_query_name(name) else pair


def url_credentials(url: str) -> set[str]:
    """The credentials written in `url`: its userinfo's password (or lone token) and its
    credential-like query values, each as written and percent-decoded."""
    parts = _URL_PARTS.fullmatch(url)
    found: set[str] = set()
    if parts is None:
        return found
    if parts["userinfo"]:
        user, colon, password = parts["userinfo"][:-1].partition(":")
        found |= {password, unquote(password)} if colon else {user, unquote(user)}
    for pair in (parts["query"] or "?")[1:].split("&"):
        name, _, value = pair.partition("=")
        if value and is_credential_query_name(name):
            found |= {value, unquote_plus(value)}
    return found


def sent_credentials(headers: Mapping[str, object], url: str = "") -> frozenset[str]:
    """Every credential one request carried, to be masked wherever its answer echoes it:
    the value of each header a reader is not shown (a minted token's `Authorization`
    and the completion token included, Sundial's other `X-Sundial-*` names and ids not),
    and for a `Scheme credentials` value the credentials alone; and `url`'s
    (url_credentials). Values shorter than ECHO_MIN_CHARS are left out."""
    found = url_credentials(url)
    for name, value in headers.items():
        lower = str(name).lower()
        if shows_header_value(lower) or (lower.startswith(_SUNDIAL_PREFIX)
                                         and lower != COMPLETION_TOKEN_HEADER.lower()):
            continue
        text = str(value).strip()
        found.add(text)
        found.add(text.partition(" ")[2].strip())  # "Bearer ya29...": the token alone
    return frozenset(value for value in found if len(value) >= ECHO_MIN_CHARS)


def redact_echoes(text: str, credentials: Iterable[str], cut: bool = False) -> str:
    """`text` (an answer, or anything made of it) with every occurrence of each of
    `credentials` replaced by MASK, the longest first. `cut`: the text was cut short, so
    a credential's beginning at its very end (4 characters or more) is masked too."""
    ordered = sorted(set(credentials), key=len, reverse=True)
    for value in ordered:
        if value and value in text:
            text = text.replace(value, MASK)
    if cut:
        for value in ordered:
            start = _cut_off_at(text, value)
            if start >= 0:
                return text[:start] + MASK
    return text


def _cut_off_at(text: str, value: str) -> int:
    """Where the longest beginning of `value` (of _PARTIAL_CHARS or more, shorter than
    all of it) that ends `text` starts, or -1."""
    head = value[:_PARTIAL_CHARS]
    if len(head) < _PARTIAL_CHARS:
        return -1
    start = text.find(head, max(len(text) - len(value) + 1, 0))
    while start >= 0 and not value.startswith(text[start:]):
        start = text.find(head, start + 1)
    return start


def same_origin(url: str, other: str) -> bool:
    """Whether two absolute URLs name the same scheme, host and port."""
    return origin(url) == origin(other)


def embedded_ipv4(address: IPAddress) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address stands for or tunnels to, if any."""
    if isinstance(address, ipaddress.IPv4Address):
        return None
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.teredo is not None:
        return address.teredo[1]  # the client's address; the server is Teredo's own
    packed = address.packed
    if address in _SIX_TO_FOUR:
        return ipaddress.IPv4Address(packed[2:6])
    if any(address in net for net in _NAT64) or address in _IPV4_TRANSLATED:
        return ipaddress.IPv4Address(packed[-4:])
    if address in _IPV4_COMPATIBLE and int(address) > 1:  # not :: or ::1
        return ipaddress.IPv4Address(packed[-4:])
    return None


def address_refusal(address: IPAddress, backend: str) -> str | None:
    """Why `address` may not be called on `backend` ("local" or "cloud"), or None."""
    inner = embedded_ipv4(address)
    if inner is not None:
        return address_refusal(inner, backend)
    if address.is_link_local:
        return "a link-local address"  # the metadata server lives here, on every platform
    if backend != "cloud":
        return None  # local services are the embedded backend's normal targets
    unicast = isinstance(address, ipaddress.IPv4Address) or address in _GLOBAL_UNICAST
    if address.is_global and unicast and not address.is_multicast:
        return None
    return f"a {_kind(address)} address on the cloud backend"


def _kind(address: IPAddress) -> str:
    for kind, test in (("loopback", address.is_loopback), ("multicast", address.is_multicast),
                       ("site-local", isinstance(address, ipaddress.IPv6Address) and address.is_site_local),
                       ("private", address.is_private)):
        if test:
            return kind
    return "non-public"


@dataclass(frozen=True)
class OwnService:
    """Where Sundial itself receives tasks, and what it lends projects of its Google
    identities (statemachine/identities.py). No `cloud_tasks` target may create a task on
    any name of its service (`names`: the service URL, the host names the operator lists,
    the platform's other forms of it), on its chain queue or any shard of it
    (`{queue}-{i}`, statemachine/shards.py), or on a throttle's queue, since such a task
    would arrive looking like one of Sundial's own. `identities` decides which service
    accounts and audiences a project's `auth` may name."""

    service_url: str = ""
    chain_queue: str = ""
    other_hosts: frozenset[str] = frozenset()  # custom domains, Cloud Run's other URL
    cloud_run_service: str = ""  # K_SERVICE: both of Cloud Run's host names of it are Sundial's
    app_engine_app: str = ""  # every appspot.com name of this app is Sundial's
    identities: IdentityRules = field(default_factory=IdentityRules)

    @property
    def names(self) -> ServiceNames:
        return ServiceNames(self.service_url, self.other_hosts, self.cloud_run_service, self.app_engine_app)

    def refusal(self, url: str, queue: str) -> tuple[str, str] | None:
        """(field, why) when a cloud_tasks target with this `url` and `queue` is
        refused, else None."""
        queue_id = queue.rstrip("/").rsplit("/", 1)[-1]
        if self.chain_queue and (is_chain_queue(queue_id, self.chain_queue)
                                 or queue_id.startswith(f"{self.chain_queue}-t-")):
            return "queue", f"queue {queue_id} is Sundial's own (its chain queue or a throttle's)"
        if "$" not in url and self.names.answers(url):
            return "url", f"{url} is on Sundial's own service ({self.service_url or host_of(url)})"
        return None

    def identity_refusal(self, project: str | None, kind: str, account: str, audience: str,
                         url: str) -> tuple[str, str] | None:
        """(field, why) when a target of `project` at `url` may not carry a token of
        `account` (IdentityRules.refusal), else None."""
        return self.identities.refusal(project, kind, account, audience, url, self.names)

    def fingerprint(self, project: str) -> str:
        """Everything a project's validation depends on here, as text: the configs import
        checks a project's file again when it changes, though the file did not."""
        names = self.names
        return "|".join([self.chain_queue, names.service_url, ",".join(sorted(names.hosts)),
                         names.cloud_run_service, names.app_engine_app, self.identities.fingerprint(project)])


def is_loopback_host(host: str) -> bool:
    """Whether a URL's host names this machine: `localhost` (and names under it) or a
    loopback address, written literally."""
    host = host.lower().rstrip(".").strip("[]")
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
