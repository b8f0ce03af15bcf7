"""Which Google identities a project's targets may borrow, and the names Sundial's own
service answers to (docs/REFERENCE.md, `auth`; docs/SECURITY.md). Pure: validation
(config/auth.py) and delivery (engine/targets/) decide with these same functions.

Why a grant at all: an `auth` target makes Sundial mint a token of a service account
and send it to a URL the project chooses. Without a grant every project could borrow
Sundial's own account (and its roles: the datastore, every project's secrets, the chain
queue), the account its task queue uses, or the account another team set up for its
own targets. So the operator, never a project file or the API, lists the accounts each
project may name (`ProjectIdentities.accounts`) and the OIDC audiences it may ask for
beyond its target URL's origin (`ProjectIdentities.audiences`).

Why Sundial's own names: a token whose audience is Sundial's service would be accepted
by Sundial's own checks (its cron handlers, its Google ID-token callers), and a
`cloud_tasks` task to Sundial's service would arrive looking like one of its own. A
service answers to more than its configured URL: Cloud Run gives every service two host
names (`NAME-HASH-REGIONCODE.a.run.app` and `NAME-PROJECTNUMBER.REGION.run.app`), and
App Engine one per version and region (`VERSION-dot-APP.appspot.com`,
`APP.REGIONID.r.appspot.com`). The Cloud Run forms are matched by the service's name
alone, whatever the hash, number or region, since neither can be derived from the
settings: a service of the same name in another Google Cloud project is refused too
(a rare cost, and its custom domain still works).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Mapping

_CLOUD_RUN_HASHED = re.compile(r"(?P<name>[a-z0-9-]+)-[a-z0-9]+-[a-z0-9]+\.a\.run\.app")
_CLOUD_RUN_NUMBERED = re.compile(r"(?P<name>[a-z0-9-]+)-[0-9]+\.[a-z0-9-]+\.run\.app")
_APP_ENGINE = re.compile(r"(?:[a-z0-9-]+-dot-)?(?P<app>[a-z0-9-]+)(?:\.[a-z0-9]+\.r)?\.appspot\.com")
_ORIGIN = re.compile(r"\s*([A-Za-z][A-Za-z0-9+.-]*)://(?:[^@/?#]*@)?(\[[^\]/]*\]|[^:/?#]*)(?::(\d*))?")
_DEFAULT_PORTS = {"http": 80, "https": 443}

Origin = tuple[str, str, "int | None"]


def origin(url: str) -> Origin:
    """(scheme, host, port) of an absolute URL: lower-case, the host without a trailing
    dot, the port defaulted by the scheme; ("", url, None) for anything else."""
    match = _ORIGIN.match(url)
    if not match:
        return "", url, None
    scheme, host, port = match.group(1).lower(), match.group(2).lower().rstrip("."), match.group(3)
    return scheme, host, int(port) if port else _DEFAULT_PORTS.get(scheme)


def origin_text(url: str) -> str:
    """The serialized origin of `url` (`https://svc.example`, a port only when it is not
    the scheme's own): the default audience of an OIDC token for a target at `url`."""
    scheme, host, port = origin(url)
    if not scheme:
        return ""
    shown = f":{port}" if port is not None and port != _DEFAULT_PORTS.get(scheme) else ""
    return f"{scheme}://{host}{shown}"


def host_of(url: str) -> str:
    return origin(url)[1].strip("[]")


@dataclass(frozen=True)
class ServiceNames:
    """Every name Sundial's own service answers to: its URL, more host names the operator
    lists (custom domains, Cloud Run's other URL), and the platform's other forms of it,
    derived from the URL or from the Cloud Run service's name (`cloud_run_service`) or
    the App Engine app's id (`app_engine_app`)."""

    service_url: str = ""
    hosts: frozenset[str] = frozenset()
    cloud_run_service: str = ""
    app_engine_app: str = ""

    def answers(self, url: str) -> bool:
        """Whether `url` is on Sundial's own service (any path)."""
        if self.service_url and origin(url) == origin(self.service_url):
            return True
        host = host_of(url)
        if not host or host in {name.lower().rstrip(".") for name in self.hosts}:
            return bool(host)
        return self._platform_form(host)

    def _platform_form(self, host: str) -> bool:
        """Whether `host` is one of the Cloud Run or App Engine names of this service."""
        own = host_of(self.service_url) if self.service_url else ""
        services = {self.cloud_run_service} | _matched("name", own, _CLOUD_RUN_HASHED, _CLOUD_RUN_NUMBERED)
        apps = {self.app_engine_app} | _matched("app", own, _APP_ENGINE)
        found = (_matched("name", host, _CLOUD_RUN_HASHED, _CLOUD_RUN_NUMBERED) & services
                 | _matched("app", host, _APP_ENGINE) & apps)
        return bool(found - {""})


def _matched(group: str, host: str, *patterns: re.Pattern[str]) -> set[str]:
    """`group` of each pattern that `host` matches whole."""
    return {match.group(group) for pattern in patterns if (match := pattern.fullmatch(host))}


@dataclass(frozen=True)
class ProjectIdentities:
    """What one project's targets may borrow: service accounts (lower-case emails), and
    OIDC audiences other than their target URL's origin."""

    accounts: frozenset[str] = frozenset()
    audiences: frozenset[str] = frozenset()


@dataclass(frozen=True)
class IdentityGrants:
    """The operator's grant: project id -> what its targets may borrow. A project it does
    not name may borrow nothing."""

    by_project: Mapping[str, ProjectIdentities] = field(default_factory=dict, hash=False)

    def of(self, project: str) -> ProjectIdentities:
        return self.by_project.get(project) or ProjectIdentities()

    def fingerprint(self, project: str) -> str:
        """What the grant is for `project`, as text: a change of it changes this."""
        granted = self.of(project)
        return f"accounts={','.join(sorted(granted.accounts))};audiences={','.join(sorted(granted.audiences))}"


def _trimmed(url: str) -> str:
    return url.strip().rstrip("/")


@dataclass(frozen=True)
class IdentityRules:
    """Whether a target of a project may carry a token of an account (for an audience):
    the grant, the audiences Sundial's own checks accept besides its service's names,
    and the accounts Sundial itself runs as, named in refusals so the operator sees why
    (`own_accounts`: email -> what it is)."""

    grants: IdentityGrants = field(default_factory=IdentityGrants)
    own_audiences: frozenset[str] = frozenset()  # accepted by Sundial's own checks (ID-token callers)
    own_accounts: Mapping[str, str] = field(default_factory=dict, hash=False)

    def refusal(self, project: str | None, kind: str, account: str, audience: str, url: str,
                names: ServiceNames) -> tuple[str, str] | None:
        """(field, why) when a target of `project` at `url` may not carry a token of
        `account`, else None. `kind` is oidc or oauth; `audience` is the OIDC audience
        the target names ("" for the default, its URL's origin); `names` are Sundial's
        own. `project` None (a document checked without a project) skips the grant; a
        templated URL or audience is decided at delivery, once rendered."""
        if project is not None:
            why = self._account_refusal(project, account)
            if why:
                return "service_account", why
        if kind != "oidc":
            return None
        url_origin = origin_text(url)
        templated = "$" in url_origin  # a template in the host: only the rendered URL has an origin
        aim = audience or ("" if templated else url_origin)
        if aim and (names.answers(aim) or _trimmed(aim) in map(_trimmed, self.own_audiences)):
            return "audience", (f"{aim} names Sundial's own service: a token for it would pass for one "
                                "of Sundial's own")
        if audience and project is not None and not templated and origin(audience) != origin(url) \
                and _trimmed(audience) not in map(_trimmed, self.grants.of(project).audiences):
            return "audience", (f"{audience} is not on the url's origin ({origin_text(url)}), and the operator "
                                f"has not granted project {project} that audience (SUNDIAL_IDENTITY_AUDIENCES)")
        return None

    def _account_refusal(self, project: str, account: str) -> str | None:
        email = account.strip().lower()
        if email in self.grants.of(project).accounts:
            return None
        what = self.own_accounts.get(email)
        if what:
            return (f"{account} is {what}, and the operator has not granted it to project {project} "
                    "(SUNDIAL_IDENTITIES)")
        return (f"{account} is not granted to project {project}: the operator lists the service accounts "
                "each project may use (SUNDIAL_IDENTITIES)")

    def fingerprint(self, project: str) -> str:
        """Everything a project's validation depends on here, as text."""
        return "|".join([self.grants.fingerprint(project), ",".join(sorted(self.own_audiences)),
                         ",".join(sorted(self.own_accounts))])
