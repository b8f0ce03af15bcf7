"""`auth` on http targets: tokens minted through a stand-in metadata server and a stand-in
IAM Credentials API, checked by a receiver with the test's public key (signature,
audience, email, expiry); caching; failures; redirects. The operator granted every
account named here to the project of the deliveries (tests/targets/support.py's
`billing`); tests/targets/test_identity_delivery.py is about the grant itself."""

from __future__ import annotations

import sys
import threading
import time

import pytest

from engine.targets.google_tokens import TokenMinter, default_audience
from engine.targets.http import HttpTarget
from statemachine.identities import IdentityGrants, IdentityRules, ProjectIdentities
from statemachine.safety import OwnService
from tests.support.google_identity import Google
from tests.targets.support import Receiver, delivery

CLOUD = "https://www.googleapis.com/auth/cloud-platform"
PROJECT = "billing"  # delivery()'s
STRANGER = "stranger@p.iam.gserviceaccount.com"  # granted, but IAM lets the runtime mint nothing for it


def granted(google: Google) -> OwnService:
    accounts = frozenset({google.own, google.other, STRANGER})
    return OwnService(identities=IdentityRules(IdentityGrants({PROJECT: ProjectIdentities(accounts)})))


def minter_for(google: Google, *args, **kwargs) -> TokenMinter:
    return TokenMinter(*args, own=granted(google), **kwargs)


@pytest.fixture
def google():
    stand_ins = Google()
    yield stand_ins
    stand_ins.close()


class Clock:
    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock():
    return Clock()


@pytest.fixture
def target(google, clock):
    made = HttpTarget(minter=minter_for(google, google.metadata.host, google.iam.url, clock=clock))
    yield made
    made.close()


def send(target: HttpTarget, url: str, auth: dict, **fields):
    request = delivery(url, **fields)
    request.target["http"]["auth"] = auth
    return target.deliver(request)


def oidc(account: str, audience: str = "") -> dict:
    return {"oidc": {"service_account": account, **({"audience": audience} if audience else {})}}


def oauth(account: str, scope: str = CLOUD) -> dict:
    return {"oauth": {"service_account": account, "scope": scope}}


def test_oidc_for_the_runtimes_own_account_comes_from_the_metadata_server(google, target):
    result = send(target, f"{google.receiver.url}/run?day=1", oidc(google.own))
    assert result.outcome == "succeeded", result.reason
    [checked] = google.receiver.checked
    assert checked.claims["email"] == google.own
    assert checked.claims["aud"] == google.receiver.url  # the URL's origin
    assert [hit.split("?")[0].rsplit("/", 1)[1] for hit in google.metadata.minted()] == ["identity"]
    assert google.iam.hits == []


def test_oidc_for_another_account_comes_from_iam_credentials(google, target):
    result = send(target, f"{google.receiver.url}/run", oidc(google.other, f"{google.receiver.url}/run"))
    assert result.outcome == "succeeded", result.reason
    [checked] = google.receiver.checked
    assert checked.claims["email"] == google.other
    [(path, body)] = google.iam.hits
    assert path == f"/v1/projects/-/serviceAccounts/{google.other}:generateIdToken"
    assert body == {"audience": f"{google.receiver.url}/run", "includeEmail": True}
    # IAM Credentials was called with the runtime's own access token, from the metadata server.
    assert ["token" in hit for hit in google.metadata.minted()] == [True]


@pytest.mark.parametrize("who", ["own", "other"])
def test_oauth_access_tokens_both_ways(google, target, who):
    account = getattr(google, who)
    result = send(target, f"{google.receiver.url}/access", oauth(account, f"{CLOUD} openid"))
    assert result.outcome == "succeeded", result.reason
    [checked] = google.receiver.checked
    assert (checked.claims["email"], checked.claims["scope"]) == (account, f"{CLOUD} openid")
    assert len(google.iam.hits) == (1 if who == "other" else 0)


def test_without_google_auth_installed_the_attempt_fails_saying_what_to_install(google, target, monkeypatch):
    """google-auth comes with the package's `gcp` extra; an environment without it (None in
    sys.modules stops the import as a missing library does) fails the attempt, not the sender."""
    monkeypatch.setitem(sys.modules, "google.auth", None)
    result = send(target, f"{google.receiver.url}/run", oidc(google.own))
    assert result.outcome == "failed"
    assert result.reason == (f"auth: cannot mint OIDC token for {google.own}: google-auth is not installed"
                             " (pip install 'sundial-scheduler[gcp]')")
    assert google.receiver.checked == []


def test_a_token_is_reused_until_five_minutes_before_it_expires(google, target, clock):
    for _ in range(3):
        assert send(target, f"{google.receiver.url}/run", oidc(google.own)).outcome == "succeeded"
    assert len(google.metadata.minted()) == 1
    expires = google.receiver.checked[0].claims["exp"]
    clock.now = expires - 6 * 60
    assert send(target, f"{google.receiver.url}/run", oidc(google.own)).outcome == "succeeded"
    assert len(google.metadata.minted()) == 1
    clock.now = expires - 4 * 60
    assert send(target, f"{google.receiver.url}/run", oidc(google.own)).outcome == "succeeded"
    assert len(google.metadata.minted()) == 2
    # Another audience is another token.
    assert send(target, f"{google.receiver.url}/other", oidc(google.own)).outcome == "succeeded"
    assert len(google.metadata.minted()) == 3


def test_threads_needing_the_same_token_wait_for_one_mint(google, clock):
    minter = minter_for(google, google.metadata.host, google.iam.url, clock=clock)
    tokens: list[str] = []
    threads = [threading.Thread(target=lambda: tokens.append(minter.bearer(oidc(google.other), "https://a.example/x",
                                                                           PROJECT)))
               for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(set(tokens)) == 1 and len(tokens) == 8
    assert len(google.iam.hits) == 1


def test_a_mint_that_fails_fails_the_attempt_with_an_auth_reason(google, target):
    stranger = STRANGER
    result = send(target, f"{google.receiver.url}/run", oidc(stranger))
    assert result.outcome == "failed"
    assert result.reason == (f"auth: cannot mint OIDC token for {stranger}: 403 Permission "
                             f"'iam.serviceAccounts.getOpenIdToken' denied on {stranger} "
                             "(IAM Credentials generateIdToken)")
    google.metadata.fail = 403
    result = send(target, f"{google.receiver.url}/access", oauth(google.own, "openid"))
    assert result.outcome == "failed"
    assert result.reason.startswith(f"auth: cannot mint OAuth token for {google.own}: ")
    assert google.receiver.checked == []  # nothing was sent without its token


def test_without_a_metadata_server_or_credentials_the_reason_says_so(google):
    with Receiver() as closed:
        host = closed.url.split("//")[1]
    target = HttpTarget(minter=minter_for(google, host, google.iam.url))  # nothing listens there now
    try:
        result = send(target, f"{google.receiver.url}/run", oidc(google.own))
    finally:
        target.close()
    assert result.outcome == "failed"
    assert result.reason == (f"auth: cannot mint OIDC token for {google.own}: no Google credentials here: no "
                             "metadata server answered, and there is neither GOOGLE_APPLICATION_CREDENTIALS "
                             "nor `gcloud auth application-default login`")


def test_a_redirect_to_another_host_does_not_take_the_token_along(google, target):
    with Receiver() as first, Receiver() as second:
        url = f"{first.url}/redirect-to?code=307&url={second.url}/landed"
        assert send(target, url, oidc(google.own)).outcome == "succeeded"
        assert first.requests[0].headers["Authorization"].startswith("Bearer ey")
        assert "Authorization" not in second.requests[0].headers


def test_the_default_audience_is_the_urls_origin():
    assert default_audience("https://u:p@Run.Example.com:8443/a/b?x=1#f") == "https://run.example.com:8443"
    assert default_audience("https://run.example.com:443/a") == "https://run.example.com"
    assert default_audience("http://127.0.0.1:9/a") == "http://127.0.0.1:9"


def test_off_google_cloud_iam_credentials_is_called_with_the_credentials_file(google, tmp_path, monkeypatch):
    with Receiver() as closed:
        host = closed.url.split("//")[1]
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", google.iam.key_file(tmp_path / "adc.json"))
    minter = minter_for(google, host, google.iam.url, credentials_file=str(tmp_path / "adc.json"))
    target = HttpTarget(minter=minter)
    try:
        result = send(target, f"{google.receiver.url}/run", oidc(google.other))
    finally:
        target.close()
    assert result.outcome == "succeeded", result.reason
    assert google.receiver.checked[0].claims["email"] == google.other
    assert [path for path, _ in google.iam.hits] == [
        "/token", f"/v1/projects/-/serviceAccounts/{google.other}:generateIdToken"]


def test_the_cache_stays_bounded_and_forgets_the_token_that_expires_first(google, clock):
    minter = minter_for(google, google.metadata.host, google.iam.url, clock=clock, max_tokens=2)
    google.metadata.lifetime = 3600
    minter.bearer(oidc(google.own), "https://first.example/x", PROJECT)
    google.metadata.lifetime = 7200
    for host in ("second", "third"):  # the third is one too many: the first goes
        minter.bearer(oidc(google.own), f"https://{host}.example/x", PROJECT)
    assert len(google.metadata.minted()) == 3
    minter.bearer(oidc(google.own), "https://third.example/x", PROJECT)
    assert len(google.metadata.minted()) == 3
    minter.bearer(oidc(google.own), "https://first.example/x", PROJECT)
    assert len(google.metadata.minted()) == 4
