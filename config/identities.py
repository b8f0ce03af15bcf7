"""The operator's grant of Google identities to projects, as the environment spells it
(config/settings.py reads the variables; docs/REFERENCE.md section 8):

    SUNDIAL_IDENTITIES="alpha=alpha-run@alpha-prod.iam.gserviceaccount.com;beta=b1@p.iam.gserviceaccount.com,b2@p.iam.gserviceaccount.com"
    SUNDIAL_IDENTITY_AUDIENCES="beta=https://private.beta.example"
    SUNDIAL_OWN_HOSTS="sundial.example.com,sundial-123456789012.us-central1.run.app"

`PROJECT=ITEM,ITEM` entries separated by `;` (spaces and line breaks around them are
ignored). A project not named may name no account in `auth`. Each mistake stops the
start with a message naming the variable and the entry: a grant read wrongly would
either refuse every job of a project or lend an account nobody meant to lend.

Why environment variables and not a file: every process of a deployment (each App
Engine or Cloud Run instance, `validate` in CI, the dispatcher children) reads the same
grant at start, the way it reads SUNDIAL_ADMINS and SUNDIAL_API_TOKENS, and a change
takes a deploy or a restart, which the operator does on purpose, never a file that one
instance has and another has not, or one edited under a running server.
"""

from __future__ import annotations

from typing import Callable

from config.auth import SERVICE_ACCOUNT
from config.model import PROJECT_ID
from statemachine.identities import IdentityGrants, ProjectIdentities, host_of, origin

__all__ = ["parse_identities", "parse_own_hosts"]


def parse_identities(accounts: str, audiences: str = "") -> IdentityGrants:
    """The grant of SUNDIAL_IDENTITIES (`accounts`) and SUNDIAL_IDENTITY_AUDIENCES.

    :raises ValueError: naming the variable and the entry that is wrong.
    """
    granted = _entries("SUNDIAL_IDENTITIES", accounts, _account)
    allowed = _entries("SUNDIAL_IDENTITY_AUDIENCES", audiences, _audience)
    return IdentityGrants({project: ProjectIdentities(frozenset(granted.get(project, ())),
                                                      frozenset(allowed.get(project, ())))
                           for project in sorted(set(granted) | set(allowed))})


def parse_own_hosts(raw: str) -> frozenset[str]:
    """SUNDIAL_OWN_HOSTS: host names (or URLs, whose host is taken), separated by commas
    or spaces, lower-case and without a trailing dot."""
    hosts = set()
    for item in raw.replace(",", " ").split():
        host = host_of(item) if "://" in item else item.lower().rstrip(".")
        if not host or any(char in host for char in "/@?#"):
            raise ValueError(f"SUNDIAL_OWN_HOSTS: {item!r} is not a host name, e.g. sundial.example.com")
        hosts.add(host)
    return frozenset(hosts)


def _entries(variable: str, raw: str, item_of: Callable[[str, str, str], str]) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for position, entry in enumerate((part.strip() for part in raw.split(";")), start=1):
        if not entry:
            continue
        project, equals, items = (part.strip() for part in entry.partition("="))
        if not equals or not PROJECT_ID.fullmatch(project):
            raise ValueError(f"{variable} entry {position}: expected PROJECT=ITEM,ITEM (a project id, "
                             f"then '='), got {entry[:80]!r}")
        if project in found:
            raise ValueError(f"{variable}: project {project} is named twice; list its items in one entry")
        found[project] = {item_of(variable, project, item.strip()) for item in items.split(",") if item.strip()}
        if not found[project]:
            raise ValueError(f"{variable} entry {position}: project {project} lists nothing")
    return found


def _account(variable: str, project: str, item: str) -> str:
    if not SERVICE_ACCOUNT.fullmatch(item):
        raise ValueError(f"{variable}: {item!r} (for project {project}) is not a service account's email, "
                         "e.g. sa@PROJECT.iam.gserviceaccount.com")
    return item.lower()


def _audience(variable: str, project: str, item: str) -> str:
    scheme, host, _ = origin(item)
    if scheme not in ("http", "https") or not host:
        raise ValueError(f"{variable}: {item!r} (for project {project}) is not an absolute URL, "
                         "e.g. https://private.example.com")
    return item
