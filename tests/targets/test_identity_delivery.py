"""The operator's grant of identities, at delivery (docs/SECURITY.md, "Identities Sundial lends"):
the token minter is the thing under test, through the http target as the composition root
builds it, against the stand-in metadata server and IAM Credentials API. A job stored
before its grant was withdrawn (or written around validation) gets no token: the attempt
fails with `forbidden identity`, and neither stand-in is asked for anything."""

from __future__ import annotations

import pytest

from config.settings import own_service
from engine.targets import GoogleAccess, build_targets
from engine.targets.google_tokens import TokenMinter
from tests.support.google_identity import Google
from tests.targets.support import delivery

SERVICE_URL = "https://sundial.example.run.app"
BETA = "beta-run@beta-prod.iam.gserviceaccount.com"


@pytest.fixture
def google():
    stand_ins = Google()
    yield stand_ins
    stand_ins.close()


def http_target(google: Google, identities: str, service_url: str = SERVICE_URL):
    """The http target of a deployment at `service_url` whose operator granted `identities`."""
    own = own_service({"SUNDIAL_IDENTITIES": identities, "SUNDIAL_SERVICE_URL": service_url})
    access = GoogleAccess(metadata_host=google.metadata.host, iam_url=google.iam.url)
    return build_targets("local", own, access)["http"]


def send(target, project: str, url: str, auth: dict, stage: bool = False):
    request = delivery(url, project=project)
    request.target["http"]["auth"] = auth
    return target.stage(request) if stage else target.deliver(request)


def nothing_minted(google: Google) -> bool:
    return google.metadata.minted() == [] and google.iam.hits == [] and google.receiver.checked == []


def test_mallorys_three_jobs_get_no_token(google):
    """beta names Sundial's own account (OAuth, then OIDC for the service URL) and
    alpha's account, and would have the token sent to its own URL."""
    target = http_target(google, f"alpha={google.other};beta={BETA}")
    steal = f"{google.receiver.url}/steal"
    for auth, field in [({"oauth": {"service_account": google.own}}, "service_account"),
                        ({"oidc": {"service_account": google.own, "audience": SERVICE_URL}}, "service_account"),
                        ({"oauth": {"service_account": google.other}}, "service_account")]:
        result = send(target, "beta", steal, auth)
        assert result.outcome == "failed"
        account = next(iter(auth.values()))["service_account"]
        assert result.reason == (f"forbidden identity: {field}: {account} is not granted to project beta: the "
                                 "operator lists the service accounts each project may use (SUNDIAL_IDENTITIES)")
    assert nothing_minted(google)


def test_an_audience_naming_sundial_gets_no_token_even_for_an_account_the_operator_listed(google):
    """The runtime's own account listed for beta, and the service
    URL as audience, named or by a target on Sundial's own service (the receiver stands
    for it in the second case: an address must resolve before anything is minted)."""
    cases = [(SERVICE_URL, f"{google.receiver.url}/collect", SERVICE_URL),
             (google.receiver.url, f"{google.receiver.url}/internal/tasks/tick", "")]
    for service_url, url, audience in cases:
        target = http_target(google, f"beta={google.own}", service_url)
        auth = {"oidc": {"service_account": google.own, **({"audience": audience} if audience else {})}}
        result = send(target, "beta", url, auth)
        assert result.outcome == "failed"
        assert result.reason == (f"forbidden identity: audience: {service_url} names Sundial's own service: a "
                                 "token for it would pass for one of Sundial's own")
    assert nothing_minted(google)


def test_a_staged_attempt_mints_nothing_for_a_refused_identity(google):
    target = http_target(google, f"alpha={google.other}")
    assert send(target, "beta", f"{google.receiver.url}/steal", {"oauth": {"service_account": google.other}},
                stage=True) is None
    assert nothing_minted(google)


def test_the_granted_project_gets_its_token_with_its_urls_origin_as_audience(google):
    target = http_target(google, f"alpha={google.other}")
    result = send(target, "alpha", f"{google.receiver.url}/run?day=1", {"oidc": {"service_account": google.other}})
    assert result.outcome == "succeeded", result.reason
    [checked] = google.receiver.checked
    assert (checked.claims["email"], checked.claims["aud"]) == (google.other, google.receiver.url)


def test_a_minter_built_without_a_grant_lends_nothing(google):
    minter = TokenMinter(google.metadata.host, google.iam.url)
    with pytest.raises(Exception, match="^forbidden identity: service_account: "):
        minter.bearer({"oidc": {"service_account": google.own}}, "https://a.example/x", "p")
    assert nothing_minted(google)
