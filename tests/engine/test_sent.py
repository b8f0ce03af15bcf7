"""What an attempt sent, as the invocation's log stores it (engine/sent.py): masked and
bounded before it is stored, and kept on the newest attempts only."""

from __future__ import annotations

import json
from datetime import datetime, timezone

from engine.ports import InvocationRow
from engine.recording import LOG_LIMIT, append_log
from engine.secrets import REDACTED
from engine.sent import REQUESTS_KEPT, SENT_BODY_BYTES, SENT_ENTRIES, sent_record, shown_log

NOW = datetime(2026, 5, 1, 12, 0, tzinfo=timezone.utc)


def test_every_header_but_a_harmless_few_and_secret_backed_ones_are_masked_before_storing():
    record = sent_record({"http": {"method": "PUT", "url": "https://x.example/a", "headers": {
        "Authorization": "Bearer tok-1", "X-Vendor": "from-a-secret", "X-Refresh-Token": "tok-2",
        "X-Trace": "t-1", "Content-Type": "text/plain"}, "body": "hello", "async": False}},
        frozenset({"X-Vendor"}))
    assert record == {"kind": "http", "method": "PUT", "url": "https://x.example/a", "body": "hello",
                      "async": False, "headers": {"Authorization": REDACTED, "X-Vendor": REDACTED,
                                                  "X-Refresh-Token": REDACTED, "X-Trace": REDACTED,
                                                  "Content-Type": "text/plain"}}


def test_the_urls_credentials_are_masked_and_what_the_attempt_sent_is_masked_everywhere():
    record = sent_record({"http": {"url": "https://u:pw-secret@x.example/a?api_key=key-123456&day=1",
                                   "headers": {"X-Auth-Token": "tok-abcdefgh"},
                                   "body": '{"echo":"tok-abcdefgh","k":"key-123456"}'}},
                         credentials={"tok-abcdefgh", "key-123456", "pw-secret"})
    assert record["url"] == f"https://u:{REDACTED}@x.example/a?api_key={REDACTED}&day=1"
    assert record["body"] == f'{{"echo":"{REDACTED}","k":"{REDACTED}"}}'
    assert record["headers"] == {"X-Auth-Token": REDACTED}


def test_a_request_stored_before_the_rules_is_shown_masked_by_them():
    old = {"kind": "http", "url": "https://x.example/a?token=tok-1", "headers": {"X-Trace": "t-1",
                                                                                "Accept": "a"}}
    log = [{"message": "attempt 1: succeeded", "request": old}, {"message": "finished"}]
    assert shown_log(log) == [{"message": "attempt 1: succeeded", "request": {
        "kind": "http", "url": f"https://x.example/a?token={REDACTED}",
        "headers": {"X-Trace": REDACTED, "Accept": "a"}}}, {"message": "finished"}]
    assert log[0]["request"] is old and old["headers"]["X-Trace"] == "t-1"  # the row is not changed


def test_a_minted_token_is_recorded_as_a_masked_authorization_header():
    # `auth` mints the token inside the sender, after the target was rendered: the record
    # still says an Authorization header went out, never its value.
    record = sent_record({"http": {"url": "https://run.example/task", "body": "{}", "auth": {
        "oidc": {"service_account": "sa@p.iam.gserviceaccount.com", "audience": "https://run.example"}}}})
    assert record["headers"] == {"Authorization": REDACTED} and "auth" not in record


def test_a_large_body_keeps_its_first_bytes_and_its_size_without_splitting_a_character():
    body = "é" * 5000  # 10,000 bytes of UTF-8
    record = sent_record({"http": {"url": "u", "body": body}})
    assert record["body_bytes"] == 10_000
    assert len(record["body"].encode()) == SENT_BODY_BYTES and set(record["body"]) == {"é"}
    assert "body_bytes" not in sent_record({"http": {"url": "u", "body": "short"}})


def test_pubsub_and_cloud_tasks_keep_their_own_fields():
    pubsub = sent_record({"pubsub": {"topic": "projects/p/topics/t", "data": "d" * 5000,
                                     "attributes": {f"a{i}": "v" for i in range(100)}}})
    assert pubsub["topic"] == "projects/p/topics/t" and pubsub["data_bytes"] == 5000
    assert len(pubsub["data"]) == SENT_BODY_BYTES and len(pubsub["attributes"]) == SENT_ENTRIES
    tasks = sent_record({"cloud_tasks": {"queue": "q", "url": "https://w", "body": "b",
                                         "headers": {"Cookie": "c=1"}}})
    assert tasks == {"kind": "cloud_tasks", "queue": "q", "url": "https://w", "body": "b",
                     "headers": {"Cookie": REDACTED}}


def test_only_the_newest_attempts_keep_their_request_and_a_long_log_stays_far_below_1_mib():
    row = InvocationRow("p", "j", "i", "RUNNING", NOW, "scheduled")
    biggest = sent_record({"http": {"url": "u" * 10_000, "body": "b" * 100_000,
                                    "headers": {f"X-H{i}-" + "n" * 300: "v" * 1000 for i in range(100)}}})
    for attempt in range(1, 400):
        append_log(row, NOW, f"attempt {attempt}: failed", detail="d" * 500, request=biggest)
    with_request = [entry for entry in row.log if "request" in entry]
    assert len(row.log) == LOG_LIMIT and len(with_request) == REQUESTS_KEPT
    assert with_request[-1] is row.log[-1]  # the newest attempts keep theirs
    assert len(json.dumps(row.log).encode()) < 512 * 1024  # Datastore's entity limit is 1 MiB
