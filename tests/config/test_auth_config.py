"""`auth` of http and cloud_tasks targets (docs/REFERENCE.md section 2.5): what is
accepted and normalized, and the error of each mistake, naming its field. The operator
granted SA to the project `p` (tests/config/test_identity_grants.py is about the grant)."""

import pytest

from tests.config.helpers import errors, project

SA = "sched@p.iam.gserviceaccount.com"
QUEUE = "projects/p/locations/l/queues/q"


@pytest.fixture(autouse=True)
def granted(monkeypatch):
    monkeypatch.setenv("SUNDIAL_IDENTITIES", f"p={SA}")


def job_with(target: str, on_failure: str = "") -> str:
    """A project with one job `a` whose target (one line of flow style) is on line 6."""
    lines = ["# a project with one job", "jobs:", "  - id: a", "    schedule: triggered", "    target:",
             "      " + target]
    if on_failure:
        lines += ["    on_failure:", "      " + on_failure]
    return "\n".join(lines) + "\n"


def target_of(source: str, backend: str = "local") -> dict:
    [config] = project(source, backend).jobs
    return config.definition.target


def test_oidc_without_audience_is_kept_without_one_and_oauth_gets_the_default_scope():
    http = target_of(job_with(f"http: {{url: 'https://run.example.com/a?x=1', "
                              f"auth: {{oidc: {{service_account: {SA}}}}}}}"))
    assert http["http"]["auth"] == {"oidc": {"service_account": SA}}
    oauth = target_of(job_with(f"http: {{url: 'https://run.example.com/a', "
                               f"auth: {{oauth: {{service_account: {SA}}}}}}}"))
    assert oauth["http"]["auth"] == {"oauth": {"service_account": SA,
                                               "scope": "https://www.googleapis.com/auth/cloud-platform"}}


def test_cloud_tasks_and_on_failure_take_auth_too():
    source = job_with(f"cloud_tasks: {{queue: {QUEUE}, url: 'https://run.example.com/a', "
                      f"auth: {{oidc: {{service_account: {SA}, audience: 'https://run.example.com'}}}}}}",
                      on_failure=f"http: {{url: 'https://hook.example.com', auth: {{oauth: {{service_account: {SA}, "
                                 "scope: 'openid https://www.googleapis.com/auth/userinfo.email'}}}")
    [config] = project(source).jobs
    assert config.definition.target["cloud_tasks"]["auth"] == {
        "oidc": {"service_account": SA, "audience": "https://run.example.com"}}
    assert config.definition.on_failure["http"]["auth"]["oauth"]["scope"] == (
        "openid https://www.googleapis.com/auth/userinfo.email")


def test_a_loopback_http_audience_is_allowed_on_the_embedded_backend_only():
    source = job_with(f"http: {{url: 'http://127.0.0.1:9/a', auth: {{oidc: {{service_account: {SA}, "
                      "audience: 'http://127.0.0.1:9'}}}")
    assert errors(source) == []
    cloud = job_with(f"cloud_tasks: {{queue: {QUEUE}, url: 'https://r.example.com/a', auth: {{oidc: "
                     f"{{service_account: {SA}, audience: 'http://127.0.0.1:9'}}}}}}")
    assert errors(cloud, "cloud") == [
        "p.yaml:6: job 'a': target.cloud_tasks.auth.oidc.audience: 'http://127.0.0.1:9' must be an "
        "https:// URL (http:// only for a loopback host on the embedded backend)"]


URL = "url: 'https://run.example.com/a'"
CASES = [
    ("neither", f"http: {{{URL}, auth: {{}}}}",
     "target.http.auth: needs exactly one of oidc, oauth; has none"),
    ("both", f"http: {{{URL}, auth: {{oidc: {{service_account: {SA}}}, oauth: {{service_account: {SA}}}}}}}",
     "target.http.auth: needs exactly one of oidc, oauth; has oidc and oauth"),
    ("unknown kind", f"http: {{{URL}, auth: {{oidcc: {{service_account: {SA}}}}}}}",
     ["unknown field 'target.http.auth.oidcc' (did you mean 'oidc'?)",
      "target.http.auth: needs exactly one of oidc, oauth; has none"]),
    ("unknown field", f"http: {{{URL}, auth: {{oidc: {{service_account: {SA}, scope: x}}}}}}",
     "unknown field 'target.http.auth.oidc.scope'; expected one of: service_account, audience"),
    ("no account", f"http: {{{URL}, auth: {{oauth: {{scope: 'https://www.googleapis.com/auth/x'}}}}}}",
     "target.http.auth.oauth.service_account: is required, e.g. sa@PROJECT.iam.gserviceaccount.com"),
    ("not an email", f"http: {{{URL}, auth: {{oidc: {{service_account: sched}}}}}}",
     "target.http.auth.oidc.service_account: 'sched' is not a service account's email, "
     "e.g. sa@PROJECT.iam.gserviceaccount.com"),
    ("relative audience", f"http: {{{URL}, auth: {{oidc: {{service_account: {SA}, audience: /run}}}}}}",
     "target.http.auth.oidc.audience: '/run' is not an absolute URL, e.g. https://service.example.com"),
    ("http audience", f"http: {{{URL}, auth: {{oidc: {{service_account: {SA}, audience: 'http://run.example.com'}}}}}}",
     "target.http.auth.oidc.audience: 'http://run.example.com' must be an https:// URL "
     "(http:// only for a loopback host on the embedded backend)"),
    ("bad scope", f"http: {{{URL}, auth: {{oauth: {{service_account: {SA}, scope: cloud-platform}}}}}}",
     "target.http.auth.oauth.scope: 'cloud-platform' is not an OAuth scope, e.g. "
     "https://www.googleapis.com/auth/cloud-platform (several are separated by spaces)"),
    ("and an Authorization header",
     f"http: {{{URL}, headers: {{authorization: 'Bearer x'}}, auth: {{oidc: {{service_account: {SA}}}}}}}",
     "target.http.auth: sets Authorization, and so does headers.authorization: keep one of them"),
    ("and user:password in the url",
     f"http: {{url: 'https://u:pw@run.example.com/a', auth: {{oidc: {{service_account: {SA}}}}}}}",
     "target.http.auth: sets Authorization, and so does the user:password in url: keep one of them"),
]


@pytest.mark.parametrize("target, expected", [case[1:] for case in CASES], ids=[case[0] for case in CASES])
def test_auth_error(target, expected):
    expected = [expected] if isinstance(expected, str) else expected
    assert errors(job_with(target)) == [f"p.yaml:6: job 'a': {line}" for line in expected]


@pytest.mark.parametrize("kind", ["http", "cloud_tasks"])
def test_auth_beside_a_url_with_a_broken_bracketed_host_is_an_error_not_a_crash(kind):
    """schemathesis: `HTtps://(]x` with `auth` raised ValueError in the Authorization check (a 500)."""
    queue = f"queue: {QUEUE}, " if kind == "cloud_tasks" else ""
    found = errors(job_with(f"{kind}: {{{queue}url: 'https://(]x', auth: {{oidc: {{service_account: {SA}}}}}}}"))
    assert found and all(line.startswith("p.yaml:6:") for line in found), found
    assert any("bad host" in line for line in found), found


def test_an_audience_with_a_broken_bracketed_host_is_an_error_not_a_crash():
    found = errors(job_with(f"http: {{url: 'https://a.example.com/', "
                            f"auth: {{oidc: {{service_account: {SA}, audience: 'https://[x/y'}}}}}}"))
    assert found and all(line.startswith("p.yaml:6:") for line in found), found
    assert any("is not an absolute URL" in line for line in found), found
