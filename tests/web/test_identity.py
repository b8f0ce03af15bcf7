"""Identities from real signed JWTs: IAP assertions (ES256) and Google ID tokens (RS256),
made with keys generated here and checked by google-auth against certificates served by
a stand-in endpoint; bearer tokens of SUNDIAL_API_TOKENS."""

from __future__ import annotations

import time

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from google.auth import crypt, jwt

from config.settings import Settings
from tests.cloud.test_guard import FakeCertsEndpoint, SigningKey
from web.identity import (
    GOOGLE_ISSUERS,
    IAP_ISSUER,
    OPEN,
    Caller,
    Identifier,
    JwtChecker,
    Unauthenticated,
    identifier_from_settings,
    parse_api_tokens,
)

IAP_AUDIENCE = "/projects/123/apps/sundial-prod"
ID_AUDIENCE = "https://sundial-prod.appspot.com"


class IapKey:
    """An EC P-256 key as IAP signs with; IAP publishes the public key in PEM."""

    def __init__(self, key_id: str):
        self.key_id = key_id
        key = ec.generate_private_key(ec.SECP256R1())
        pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
        self.signer = crypt.ES256Signer.from_string(pem, key_id)
        self.certificate = key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo).decode()

    def token(self, **overrides) -> str:
        now = int(time.time())
        claims = {"iss": IAP_ISSUER, "aud": IAP_AUDIENCE, "email": "Alice@Example.com",
                  "sub": "accounts.google.com:1", "iat": now, "exp": now + 600}
        claims.update(overrides)
        return jwt.encode(self.signer, {k: v for k, v in claims.items() if v is not None}).decode()


@pytest.fixture(scope="module")
def iap_key():
    return IapKey("iap-1")


@pytest.fixture(scope="module")
def google_key():
    return SigningKey("google-1")


@pytest.fixture
def identifier(iap_key, google_key):
    iap = JwtChecker("iap-certs", IAP_AUDIENCE, (IAP_ISSUER,), FakeCertsEndpoint(iap_key))
    ids = JwtChecker("google-certs", ID_AUDIENCE, GOOGLE_ISSUERS, FakeCertsEndpoint(google_key))
    return Identifier({"tok-1": "user:bob@example.com"}, on_app_engine=True, iap=iap, id_tokens=ids)


def id_token(key: SigningKey, **overrides) -> str:
    return key.token(**{"aud": ID_AUDIENCE, "email": "Carol@Example.com", **overrides})


def test_a_verified_iap_assertion_names_its_user(identifier, iap_key):
    caller = identifier.identify({"X-Goog-IAP-JWT-Assertion": iap_key.token()})
    assert caller == Caller("user:alice@example.com")


@pytest.mark.parametrize("claims", [
    {"aud": "/projects/999/apps/other"}, {"iss": "https://accounts.google.com"},
    {"exp": int(time.time()) - 3600, "iat": int(time.time()) - 7200}, {"email": None},
])
def test_an_iap_assertion_that_does_not_verify_is_refused(identifier, iap_key, claims):
    with pytest.raises(Unauthenticated):
        identifier.identify({"X-Goog-IAP-JWT-Assertion": iap_key.token(**claims)})


def test_an_iap_assertion_signed_by_another_key_is_refused(identifier):
    forged = IapKey("iap-1").token()  # the right key id, a key of the forger's own
    with pytest.raises(Unauthenticated):
        identifier.identify({"X-Goog-IAP-JWT-Assertion": forged})


def test_a_google_id_token_names_a_user_or_a_service_account(identifier, google_key):
    assert identifier.identify({"Authorization": f"Bearer {id_token(google_key)}"}) == Caller(
        "user:carol@example.com")
    robot = id_token(google_key, email="ci@proj.iam.gserviceaccount.com")
    assert identifier.identify({"Authorization": f"Bearer {robot}"}) == Caller(
        "serviceAccount:ci@proj.iam.gserviceaccount.com")


@pytest.mark.parametrize("claims", [{"email_verified": False}, {"aud": "https://other.appspot.com"},
                                    {"iss": IAP_ISSUER}])
def test_an_id_token_that_does_not_verify_is_refused(identifier, google_key, claims):
    with pytest.raises(Unauthenticated):
        identifier.identify({"Authorization": f"Bearer {id_token(google_key, **claims)}"})


def test_api_tokens_and_anonymous_callers(identifier):
    assert identifier.identify({"Authorization": "Bearer tok-1"}) == Caller("user:bob@example.com")
    with pytest.raises(Unauthenticated):
        identifier.identify({"Authorization": "Bearer tok-2"})
    # API tokens configured: no credential at all is refused too.
    with pytest.raises(Unauthenticated):
        identifier.identify({})
    assert Identifier(on_app_engine=True).identify({}) == Caller("anonymous")


def test_with_nothing_configured_every_caller_is_an_owner():
    identifier = identifier_from_settings(Settings())
    assert identifier.open_access
    assert identifier.identify({"Authorization": "Bearer anything"}) is OPEN


def test_malformed_api_tokens_name_the_variable_and_the_entry_not_the_token():
    assert parse_api_tokens(" a=user:X@Y.com , b=serviceAccount:s@p ") == {
        "a": "user:x@y.com", "b": "serviceAccount:s@p"}
    for raw in ("secret-token", "t=alice@example.com", "t=group:ops", "=user:a@b"):
        with pytest.raises(ValueError) as error:
            parse_api_tokens("ok=user:a@b," + raw)
        assert "SUNDIAL_API_TOKENS entry 2" in str(error.value)
        assert "secret-token" not in str(error.value)
    with pytest.raises(SystemExit):
        identifier_from_settings(Settings(api_tokens="oops"))
