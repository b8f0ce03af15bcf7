"""What readers are shown of credentials (statemachine/safety.py, engine/masking.py): every
literal header value but a harmless few's, a URL's password and credential-like query
values, and the credentials an attempt sent wherever its answer echoes them; and how a
PUT of what a GET showed keeps the stored values, on the same host only."""

from __future__ import annotations

import pytest

from engine.masking import MaskedValues, masked_definition, masked_target, unmasked_entry
from statemachine.definition import JobDefinition
from statemachine.safety import MASK, masked_url, redact_echoes, sent_credentials

CREDENTIAL_HEADERS = {"Authorization": "Bearer lit-1", "X-Auth-Token": "lit-2", "X-Goog-Api-Key": "lit-3",
                      "Private-Token": "lit-4", "X-My-Secret": "lit-5", "X-Anything": "lit-6",
                      "proxy-authorization": "lit-7"}
HARMLESS = {"Content-Type": "application/json", "accept": "*/*", "User-Agent": "me/1",
            "Cache-Control": "no-cache", "Accept-Language": "de", "Idempotency-Key": "${invocationId}"}


@pytest.mark.parametrize("kind", ["http", "cloud_tasks"])
def test_every_literal_header_but_the_harmless_few_is_masked_and_a_secret_shows_its_name(kind):
    secret = {"secret": "VENDOR", "prefix": "Bearer "}
    target = {kind: {"url": "https://w.example/run", "headers": {**CREDENTIAL_HEADERS, **HARMLESS,
                                                                   "X-Vendor": secret}}}
    shown = masked_target(target)[kind]["headers"]
    assert {name: shown[name] for name in CREDENTIAL_HEADERS} == dict.fromkeys(CREDENTIAL_HEADERS, MASK)
    assert {name: shown[name] for name in HARMLESS} == HARMLESS
    assert shown["X-Vendor"] == secret
    assert target[kind]["headers"]["X-Auth-Token"] == "lit-2"  # the definition itself keeps its values


def test_the_hooks_are_masked_like_the_target():
    hook = {"http": {"url": "https://h.example/x?token=hook-tok", "headers": {"X-Auth-Token": "hook-lit"}}}
    definition = JobDefinition(id="j", schedule="every 1m", target={"noop": {}}, on_failure=hook,
                               on_recovery=hook)
    shown = masked_definition(definition)
    for spec in (shown.on_failure["http"], shown.on_recovery["http"]):
        assert spec == {"url": f"https://h.example/x?token={MASK}", "headers": {"X-Auth-Token": MASK}}
    assert shown.target == {"noop": {}}


@pytest.mark.parametrize("url, shown", [
    ("https://a.example/x?api_key=K1&day=1", f"https://a.example/x?api_key={MASK}&day=1"),
    ("https://a.example/x?APIKEY=K&apikey=K&Access_Token=T&auth=A&signature=S&sig=S&password=P&secret=S",
     "https://a.example/x?" + "&".join(f"{name}={MASK}" for name in
                                       ("APIKEY", "apikey", "Access_Token", "auth", "signature", "sig",
                                        "password", "secret"))),
    ("https://a.example/x?X-Amz-Credential=c&X-Amz-Signature=s&client%5Fsecret=s&page=2",
     f"https://a.example/x?X-Amz-Credential={MASK}&X-Amz-Signature={MASK}&client%5Fsecret={MASK}&page=2"),
    ("https://user:pa%20ss@a.example/x", f"https://user:{MASK}@a.example/x"),
    ("https://ghp_token@a.example/x", f"https://{MASK}@a.example/x"),
    ("https://a.example/x?token=${jobId}#frag", f"https://a.example/x?token={MASK}#frag"),
    ("https://a.example/x?token=&day=1", "https://a.example/x?token=&day=1"),
    ("https://a.example/p@q?day=1", "https://a.example/p@q?day=1"),
])
def test_credentials_in_a_url_are_masked_and_masking_twice_changes_nothing(url, shown):
    assert masked_url(url) == shown
    assert masked_url(shown) == shown


def test_the_credentials_an_attempt_sent_are_its_header_values_and_its_urls():
    found = sent_credentials({"Authorization": "Bearer ya29.minted-token", "Content-Type": "application/json",
                              "X-Sundial-Invocation": "inv-123456789", "X-Sundial-Completion-Token": "c" * 64,
                              "X-Short": "1234567", "X-Auth-Token": "literal-token"},
                             "https://u:pass-word@a.example/x?api_key=key%2B12345&day=12345678")
    assert found == {"Bearer ya29.minted-token", "ya29.minted-token", "c" * 64, "literal-token", "pass-word",
                     "key%2B12345", "key+12345"}


def test_an_echo_is_masked_wherever_it_occurs_and_at_the_end_of_a_cut_answer():
    token = "ya29.minted-token-0123456789"
    credentials = sent_credentials({"Authorization": f"Bearer {token}"})
    echoed = f"got Authorization: Bearer {token}; again {token}; cut {token[:20]}"
    assert redact_echoes(echoed, credentials) == f"got Authorization: {MASK}; again {MASK}; cut {token[:20]}"
    assert redact_echoes(echoed, credentials, cut=True).endswith(f"cut {MASK}")
    assert redact_echoes("ends ya2", credentials, cut=True) == "ends ya2"  # 3 characters: a coincidence
    assert redact_echoes("y" * 2000 + token[:700], credentials, cut=True) == "y" * 2000 + MASK
    assert redact_echoes("a short x", {"short"}) == f"a {MASK} x"  # only sent_credentials leaves short ones out


def _stored(url: str = "https://w.example/run?api_key=K-123", **headers) -> JobDefinition:
    return JobDefinition(id="j", schedule="every 1m", target={"http": {
        "url": url, "headers": {"X-Auth-Token": "lit-2", "Content-Type": "text/plain", **headers}}})


def test_a_put_of_what_a_get_showed_keeps_the_stored_values():
    stored = _stored()
    shown = {"schedule": "every 5m", "target": masked_target(stored.target)}
    assert unmasked_entry(shown, stored) == {"schedule": "every 5m", "target": stored.target}


def test_a_new_value_beside_a_mask_is_taken_and_the_mask_keeps_the_old_one():
    stored = _stored()
    entry = {"target": {"http": {"url": f"https://w.example/other?api_key={MASK}", "headers": {
        "x-auth-token": MASK, "X-New": "new-value"}}}}
    with pytest.raises(MaskedValues) as refused:  # the URL changed: its mask stands for nothing
        unmasked_entry(entry, stored)
    assert refused.value.messages == [f"target.http.url: {MASK} stands for a stored value only in the whole "
                                      "URL as a GET shows it; send the value itself"]
    entry["target"]["http"]["url"] = "https://w.example/other?api_key=K-999"
    assert unmasked_entry(entry, stored)["target"]["http"]["headers"] == {"x-auth-token": "lit-2",
                                                                          "X-New": "new-value"}


def test_a_mask_is_refused_on_another_host_for_a_new_job_and_for_a_header_the_job_lacks():
    stored = _stored()
    moved = {"target": {"http": {"url": "https://evil.example/run", "headers": {"X-Auth-Token": MASK}}}}
    with pytest.raises(MaskedValues, match="scheme, host and port stay the same"):
        unmasked_entry(moved, stored)
    with pytest.raises(MaskedValues, match="only in a header the job has"):
        unmasked_entry({"target": {"http": {"url": "https://w.example/run", "headers": {"X-Auth-Token": MASK}}}},
                       None)
    with pytest.raises(MaskedValues, match="only in a header the job has"):
        unmasked_entry({"target": {"http": {"url": "https://w.example/run", "headers": {"X-Other": MASK}}}},
                       stored)
    unmasked_entry({"target": {"noop": {}}}, stored)  # nothing masked: nothing to refuse
