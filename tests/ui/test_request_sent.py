"""The invocation page's "Request sent": the attempt's own record, and for an invocation
older than that record, today's definition rendered, as the small print says."""

from __future__ import annotations

import re

from tests.ui.test_pages import text


def trigger(ui, body: str) -> str:
    ui.put("sender", {"schedule": "triggered", "target": {"http": {
        "url": "http://127.0.0.1:9/v1", "body": body, "headers": {"X-Trace": "t-1"}}}})
    invocation = ui.post("sender", ":trigger").get_json()["id"]
    ui.until(1)
    return invocation


def test_a_large_body_shows_its_first_4_kib_and_says_so(ui):
    invocation = trigger(ui, "x" * 5000)
    page = ui.page(f"/p/demo/sender/{invocation}")
    assert "x" * 4096 in page and "x" * 4097 not in page
    assert "the body's first 4 KiB of 5,000 bytes" in page and 'id="sent-recorded"' in page


def test_an_invocation_without_a_record_falls_back_to_the_current_definition(ui):
    invocation = trigger(ui, "old body")

    def forget(tx):  # as an invocation recorded before attempts kept what they sent
        row = tx.get_invocation("demo", "sender", invocation)
        row.log = [{key: value for key, value in entry.items() if key != "request"} for entry in row.log]
        tx.put_invocation(row)

    ui.store.run_in_transaction(forget)
    ui.put("sender", {"schedule": "triggered", "target": {"http": {"url": "http://127.0.0.1:9/v2", "body": "new"}}})
    page = ui.page(f"/p/demo/sender/{invocation}")
    assert 'id="sent-rendered"' in page and "POST http://127.0.0.1:9/v2" in page
    assert "As the job's current definition renders it" in page
    assert not re.search(r"\brequest=", text(page))  # the record is not repeated in the timeline


def test_a_pubsub_attempt_shows_its_topic_attributes_and_data(ui):
    ui.engine.deliveries.targets["pubsub"] = ui.target  # stands in for Pub/Sub: the page is the subject
    ui.put("publisher", {"schedule": "triggered", "target": {"pubsub": {
        "topic": "projects/p/topics/orders", "data": "run ${invocationId}", "attributes": {"origin": "sundial"}}}})
    invocation = ui.post("publisher", ":trigger").get_json()["id"]
    ui.until(1)
    page = text(ui.page(f"/p/demo/publisher/{invocation}"))
    assert "pubsub" in page and "projects/p/topics/orders" in page and f"run {invocation}" in page
    assert "origin" in page and "As the latest attempt sent it" in page
