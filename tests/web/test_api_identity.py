"""The operator's grant of identities through the API and the configs import:
mallory, owner of project beta, cannot PUT a job whose `auth` names Sundial's own
account, another project's account, or Sundial's own service as audience; and a job a
file defined under a grant since withdrawn shows the error as any broken entry does."""

from __future__ import annotations

import pytest

from app.importer import import_directory
from config.settings import from_environment
from tests.web.conftest import Api, error_of
from web.app import create_app

RUNTIME = "sundial-app@rt.iam.gserviceaccount.com"
ALPHA = "alpha-deployer@alpha-prod.iam.gserviceaccount.com"
BETA = "beta-run@beta-prod.iam.gserviceaccount.com"
SERVICE_URL = "https://sundial.example.run.app"
OPERATOR = {"SUNDIAL_IDENTITIES": f"alpha={ALPHA};beta={BETA}", "SUNDIAL_SERVICE_URL": SERVICE_URL,
            "SUNDIAL_TASK_SECRET": "t"}


@pytest.fixture
def api(tmp_path) -> Api:
    served = Api(tmp_path)
    served.app = create_app(served.engine, from_environment(OPERATOR))
    served.client = served.app.test_client()
    served.write_config("beta", "jobs: []\n")
    return served


def steal(auth: dict) -> dict:
    """mallory's job: a token sent to mallory's own URL."""
    return {"schedule": "triggered", "target": {"http": {"url": "http://127.0.0.1:38412/steal", "auth": auth}}}


@pytest.mark.parametrize("auth, field, named", [
    ({"oauth": {"service_account": RUNTIME}}, "oauth.service_account", RUNTIME),
    ({"oidc": {"service_account": RUNTIME, "audience": SERVICE_URL}}, "oidc.service_account", RUNTIME),
    ({"oauth": {"service_account": ALPHA}}, "oauth.service_account", ALPHA),
    ({"oidc": {"service_account": BETA, "audience": SERVICE_URL}}, "oidc.audience", SERVICE_URL),
], ids=["steal-oauth", "steal-oidc", "steal-other", "own audience"])
def test_a_put_naming_an_identity_the_project_was_not_granted_is_refused(api, auth, field, named):
    answer = api.put("steal", steal(auth), project="beta")
    assert error_of(answer) == (400, "INVALID_ARGUMENT")
    message = answer.get_json()["error"]["message"]
    assert f"target.http.auth.{field}: {named} " in message, message
    assert api.client.get(api.url("steal", project="beta")).status_code == 404  # nothing was stored


def test_a_put_naming_the_projects_own_grant_is_accepted(api):
    answer = api.put("run", steal({"oidc": {"service_account": BETA}}), project="beta")
    assert answer.status_code == 201, answer.get_json()


def shown(api: Api, job: str) -> dict:
    return api.client.get(api.url(job, project="beta")).get_json()


def test_a_file_imported_under_a_grant_since_withdrawn_shows_its_error(api):
    (api.configs / "beta.yaml").write_text(
        "jobs:\n  - id: run\n    schedule: triggered\n    target:\n      http: {url: 'https://beta.example/run', "
        f"auth: {{oidc: {{service_account: {BETA}}}}}}}\n")
    import_directory(api.engine.configs, api.configs, own=from_environment(OPERATOR).own_service)
    assert not shown(api, "run")["config_error"]
    withdrawn = from_environment({**OPERATOR, "SUNDIAL_IDENTITIES": f"alpha={ALPHA}"})
    import_directory(api.engine.configs, api.configs, own=withdrawn.own_service)  # the same file, read again
    error = shown(api, "run")["config_error"]
    assert f"target.http.auth.oidc.service_account: {BETA} is not granted to project beta" in error


def test_validate_tells_a_projects_grant_only_to_whom_may_read_the_project(api):
    """POST /validate?project=ID checks the grant for a project the caller may read
    (beta here); for one it may not (alpha exists only in the grant), the answer is the
    same whichever account is named: what alpha is granted is not the caller's to learn."""
    def errors(project: str, account: str) -> list:
        document = f"jobs:\n  - id: a\n    schedule: triggered\n    target: {{http: {{url: 'https://x.example.com/', " \
                   f"auth: {{oauth: {{service_account: {account}}}}}}}}}\n"
        return api.client.post(f"/api/v1/validate?project={project}", data=document).get_json()["errors"]
    assert errors("beta", BETA) == [] and errors("beta", ALPHA) != []
    assert errors("alpha", ALPHA) == errors("alpha", BETA) == []
