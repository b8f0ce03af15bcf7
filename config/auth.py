"""`auth` of an http or cloud_tasks target: a Google-signed token for a service account,
minted at every attempt (docs/REFERENCE.md section 2.3).

    auth: {oidc: {service_account: sa@P.iam.gserviceaccount.com, audience: https://svc.example}}
    auth: {oauth: {service_account: sa@P.iam.gserviceaccount.com, scope: https://www.googleapis.com/auth/cloud-platform}}

Normalized as `{oidc: {service_account[, audience]}}` or `{oauth: {service_account, scope}}`.
An absent audience stays absent: delivery takes the rendered target URL's origin
(engine/targets/google_tokens.py, `default_audience`), since a templated URL is only
known then.

Which accounts and audiences a project may name is the operator's grant, never the
file's (statemachine/identities.py, config/identities.py): an account not granted to the
project, an audience naming Sundial's own service, and an audience off the target URL's
origin that the operator did not grant are errors here, and delivery refuses them again.

The token is sent as `Authorization: Bearer`, so a target with `auth` may not
set Authorization itself (a header, or user:password in its URL): one would silently win.
Nothing here is templated: an account or an audience is configuration, not payload.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlsplit

from config.checks import Checker
from config.yamlsource import Path
from statemachine.safety import OwnService, is_loopback_host

__all__ = ["AUTH_KINDS", "DEFAULT_SCOPE", "OAUTH_FIELDS", "OIDC_FIELDS", "SERVICE_ACCOUNT", "parse_auth"]

AUTH_KINDS = ("oidc", "oauth")
OIDC_FIELDS = ("service_account", "audience")
OAUTH_FIELDS = ("service_account", "scope")
DEFAULT_SCOPE = "https://www.googleapis.com/auth/cloud-platform"
SERVICE_ACCOUNT = re.compile(r"[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(\.[A-Za-z0-9-]+)+")
_SCOPE = re.compile(r"https://[^\s]+|openid|email|profile")
_EXAMPLE = "{oidc: {service_account: sa@PROJECT.iam.gserviceaccount.com}}"


def parse_auth(check: Checker, path: Path, value: Any, target: dict[str, Any], backend: str,
               own: OwnService, project: str | None) -> dict[str, Any]:
    """The normalized `auth` of a target of `project` whose other fields (url, headers)
    are `target`; `own` is Sundial's own service, with the operator's grant."""
    fields = check.mapping(path, value, _EXAMPLE)
    check.known_fields(path, fields, AUTH_KINDS)
    kinds = [kind for kind in AUTH_KINDS if kind in fields]
    if len(kinds) != 1:
        given = f"has {' and '.join(kinds)}" if kinds else "has none"
        check.fail(path, f"needs exactly one of oidc, oauth; {given}")
    _refuse_other_authorization(check, path, target)
    kind = kinds[0]
    where = path + (kind,)
    spec = check.mapping(where, fields[kind], _EXAMPLE if kind == "oidc"
                         else "{service_account: sa@PROJECT.iam.gserviceaccount.com}")
    check.known_fields(where, spec, OIDC_FIELDS if kind == "oidc" else OAUTH_FIELDS)
    account = check.attempt(lambda: _account(check, where + ("service_account",),
                                             spec.get("service_account")), "")
    if kind == "oidc":
        out = {"service_account": account}
        if spec.get("audience") is not None:
            out["audience"] = check.attempt(lambda: _audience(check, where + ("audience",),
                                                              spec["audience"], backend), "")
        normalized = {"oidc": out}
    else:
        scope = check.attempt(lambda: _scope(check, where + ("scope",), spec.get("scope")), DEFAULT_SCOPE)
        normalized = {"oauth": {"service_account": account, "scope": scope}}
    _refuse_ungranted(check, where, kind, normalized[kind], target, own, project)
    return normalized


def _refuse_ungranted(check: Checker, where: Path, kind: str, spec: dict[str, Any], target: dict[str, Any],
                      own: OwnService, project: str | None) -> None:
    """The operator's grant (statemachine/identities.py), once the fields themselves are
    right: an error on the field it refuses, naming the account or the audience."""
    url = target.get("url")
    if not spec.get("service_account") or spec.get("audience") == "" or not isinstance(url, str):
        return
    refused = own.identity_refusal(project, kind, spec["service_account"], spec.get("audience", ""), url)
    if refused:
        check.report(where + (refused[0],), refused[1])


def _refuse_other_authorization(check: Checker, path: Path, target: dict[str, Any]) -> None:
    headers = target.get("headers")
    named = [name for name in (headers if isinstance(headers, dict) else {})
             if str(name).lower() == "authorization"]
    if named:
        check.report(path, f"sets Authorization, and so does headers.{named[0]}: keep one of them")
    url = target.get("url")
    if isinstance(url, str) and "@" in _netloc(url):
        check.report(path, "sets Authorization, and so does the user:password in url: keep one of them")


def _account(check: Checker, path: Path, value: Any) -> str:
    if value is None:
        check.fail(path, "is required, e.g. sa@PROJECT.iam.gserviceaccount.com")
    text = check.string(path, value, empty=False)
    if not SERVICE_ACCOUNT.fullmatch(text):
        check.fail(path, f"{text!r} is not a service account's email, e.g. sa@PROJECT.iam.gserviceaccount.com")
    return text


def _audience(check: Checker, path: Path, value: Any, backend: str) -> str:
    text = check.string(path, value, empty=False)
    try:
        parts = urlsplit(text)
        host = parts.hostname or ""
    except ValueError:  # a broken bracketed host, "https://[x"
        parts, host = urlsplit(""), ""
    if any(char.isspace() for char in text) or not host:
        check.fail(path, f"{text!r} is not an absolute URL, e.g. https://service.example.com")
    if parts.scheme == "https" or (parts.scheme == "http" and backend == "local" and is_loopback_host(host)):
        return text
    check.fail(path, f"{text!r} must be an https:// URL (http:// only for a loopback host "
                     "on the embedded backend)")


def _scope(check: Checker, path: Path, value: Any) -> str:
    if value is None:
        return DEFAULT_SCOPE
    text = check.string(path, value, empty=False)
    bad = [scope for scope in text.split() if not _SCOPE.fullmatch(scope)]
    if bad or not text.split():
        check.fail(path, f"{(bad or [text])[0]!r} is not an OAuth scope, e.g. {DEFAULT_SCOPE} "
                         "(several are separated by spaces)")
    return " ".join(text.split())


def _netloc(url: str) -> str:
    try:
        return urlsplit(url).netloc
    except ValueError:  # a broken bracketed host: the URL's own check reports it
        return ""
