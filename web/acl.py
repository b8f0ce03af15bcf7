"""What a caller may do in a project (docs/REFERENCE.md section 6), from the project's `acl`.

    READ     readers, triggerers, owners   jobs, invocations, logs
    TRIGGER  triggerers, owners            trigger, pause, resume
    OWN      owners                        abort, create/replace/delete API jobs

A member is `user:EMAIL`, `serviceAccount:EMAIL`, `group:NAME` or `anonymous` (anyone,
signed in or not). Groups are listed in the YAML file named by `SUNDIAL_GROUPS_FILE`
(`{NAME: [user:..., serviceAccount:...]}`); `group:everyone`, unless that file
defines it, is every signed-in caller. `SUNDIAL_ADMINS` (members, comma-separated)
owns every project, also those whose file has no `acl`. Emails compare without case.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

import yaml

from web.identity import ANONYMOUS, Caller

READ, TRIGGER, OWN = "read", "trigger", "own"
GRANTS = {"readers": (READ,), "triggerers": (READ, TRIGGER), "owners": (READ, TRIGGER, OWN)}
EVERYONE = "everyone"


@dataclass(frozen=True)
class Directory:
    """Group memberships and the administrators, read once at start."""

    groups: Mapping[str, frozenset[str]] = field(default_factory=dict)
    admins: tuple[str, ...] = ()

    def is_member(self, caller: Caller, member: str) -> bool:
        member = _normal(member)
        if member == ANONYMOUS or member == caller.principal:
            return True
        kind, _, name = member.partition(":")
        if kind != "group":
            return False
        if name in self.groups:
            return caller.principal in self.groups[name]
        return name == EVERYONE and not caller.is_anonymous


def permissions(caller: Caller, acl: Mapping[str, list[str]] | None, directory: Directory) -> set[str]:
    """Every permission `caller` holds in a project whose settings carry `acl`."""
    if caller.open_access or any(directory.is_member(caller, m) for m in directory.admins):
        return {READ, TRIGGER, OWN}
    held: set[str] = set()
    for role, grants in GRANTS.items():
        if any(directory.is_member(caller, m) for m in (acl or {}).get(role) or ()):
            held.update(grants)
    return held


def _normal(member: str) -> str:
    kind, sep, name = member.strip().partition(":")
    return f"{kind}:{name.lower()}" if sep and kind in ("user", "serviceAccount") else member.strip()


def load_directory(admins_text: str = "", path: str = "") -> Directory:
    """The directory from SUNDIAL_GROUPS_FILE (`path`) and SUNDIAL_ADMINS
    (`admins_text`); a broken file is an error naming it, raised at start rather than
    at the first request."""
    admins = tuple(_normal(m) for m in admins_text.split(",") if m.strip())
    if not path:
        return Directory({}, admins)
    try:
        with open(path, encoding="utf-8") as handle:
            document = yaml.safe_load(handle) or {}
    except (OSError, yaml.YAMLError) as error:
        raise SystemExit(f"SUNDIAL_GROUPS_FILE {path}: {error}") from None
    if not isinstance(document, dict):
        raise SystemExit(f"SUNDIAL_GROUPS_FILE {path}: expected a map of group name to member list")
    groups = {}
    for name, members in document.items():
        if not isinstance(members, list) or not all(isinstance(m, str) for m in members):
            raise SystemExit(f"SUNDIAL_GROUPS_FILE {path}: group {name!r}: expected a list of "
                             "user:EMAIL or serviceAccount:EMAIL")
        groups[str(name)] = frozenset(_normal(m) for m in members)
    return Directory(groups, admins)
