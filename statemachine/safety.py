"""What a project may not make Sundial send or call (docs/REFERENCE.md section 6), decided once.

Validation (config/targets.py) and delivery (engine/targets/) both ask these functions,
so a rule cannot be tightened in one place and forgotten in the other. Pure: the
standard library only.

- Framing and hop-by-hop headers belong to the connection, not to one project's
  request: a user `Content-Length` on a pooled keep-alive connection would let one
  project's body become the start of the next project's request.
- Credential headers are masked wherever a definition is shown, and dropped when a
  redirect leaves the host they were meant for.
- A `cloud_tasks` target may not create tasks on Sundial's own service or queues, nor
  tasks larger than Cloud Tasks accepts (its CreateTask reference: 100 KB).
- An address is refused when it reaches the platform (link-local, the metadata
  server) on every backend, and on the cloud backend anything that is not the public
  internet, including the IPv6 forms that carry an IPv4 address inside them.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field

from statemachine.identities import IdentityRules, ServiceNames, host_of
from statemachine.shards import is_chain_queue

# Set by Sundial or by the HTTP client for the connection, never by a target.
FRAMING_HEADERS = frozenset({
    "content-length", "transfer-encoding", "connection", "keep-alive", "te", "trailer",
    "upgrade", "host",
})
# Headers whose values are credentials even when written out in the config.
SENSITIVE_HEADERS = frozenset({"authorization", "proxy-authorization", "cookie", "x-api-key"})
COMPLETION_TOKEN_HEADER = "X-Sundial-Completion-Token"

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
    return name.lower() in SENSITIVE_HEADERS


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
                       ("site-local", getattr(address, "is_site_local", False)),
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
