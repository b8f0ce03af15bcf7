"""The Pub/Sub target against the Pub/Sub emulator: publish through the target, pull
from a subscription, and check the data and the attributes (docs/REFERENCE.md section 4)."""

from __future__ import annotations

import itertools
from datetime import datetime, timedelta, timezone

import pytest

from engine.ports import DeliveryRequest
from engine.targets.pubsub import PubSubTarget

PROJECT = "sundial-test"
SCHEDULED = datetime(2018, 3, 22, 0, 9, tzinfo=timezone.utc)
_names = itertools.count()


@pytest.fixture
def pubsub(pubsub_emulator, monkeypatch):
    """(topic path, pull()) on a fresh topic with one subscription, in the emulator."""
    from google.cloud import pubsub_v1

    monkeypatch.setenv("PUBSUB_EMULATOR_HOST", pubsub_emulator.host)
    publisher, subscriber = pubsub_v1.PublisherClient(), pubsub_v1.SubscriberClient()
    n = next(_names)
    topic = publisher.topic_path(PROJECT, f"topic-{n}")
    subscription = subscriber.subscription_path(PROJECT, f"sub-{n}")
    publisher.create_topic(name=topic)
    subscriber.create_subscription(name=subscription, topic=topic)

    def pull(expected: int = 1):
        messages = []
        for _ in range(50):
            response = subscriber.pull(subscription=subscription, max_messages=10, timeout=10)
            messages += [received.message for received in response.received_messages]
            if response.received_messages:
                subscriber.acknowledge(subscription=subscription,
                                       ack_ids=[r.ack_id for r in response.received_messages])
            if len(messages) >= expected:
                return messages
        return messages

    yield topic, pull
    subscriber.close()


@pytest.fixture
def target(pubsub):  # made after PUBSUB_EMULATOR_HOST is set: the client reads it once
    return PubSubTarget(timeout=timedelta(seconds=20))


def request(topic: str, **fields) -> DeliveryRequest:
    spec = {"topic": topic, "data": fields.pop("data", '{"date":"2018-03-21"}'),
            "attributes": fields.pop("attributes", {})}
    defaults = dict(project="billing", job_id="fitbit-worker", invocation_id="inv-0001",
                    scheduled_time=SCHEDULED, attempt=1, event_index=0, event_count=1)
    return DeliveryRequest(target={"pubsub": spec}, **{**defaults, **fields})


def test_publishes_data_with_sundials_and_the_users_attributes(pubsub, target):
    topic, pull = pubsub
    result = target.deliver(request(topic, attributes={"source": "nightly", "n": 3}))
    assert result.outcome == "succeeded", result.reason
    assert result.detail.startswith("published message ") and topic in result.detail
    [message] = pull()
    assert message.data == b'{"date":"2018-03-21"}'
    assert dict(message.attributes) == {
        "source": "nightly",
        "n": "3",
        "sundial_job": "billing/fitbit-worker",
        "sundial_invocation": "inv-0001",
        "sundial_scheduled_time": "2018-03-22T00:09:00.000Z",
        "sundial_attempt": "1",
    }


def test_fanout_events_carry_sundial_event_and_each_attempt_its_number(pubsub, target):
    topic, pull = pubsub
    for index in range(3):
        assert target.deliver(request(topic, event_index=index, event_count=3, attempt=2)).outcome == "succeeded"
    messages = pull(3)
    assert sorted(m.attributes["sundial_event"] for m in messages) == ["0/3", "1/3", "2/3"]
    assert {m.attributes["sundial_attempt"] for m in messages} == {"2"}


def test_users_cannot_set_sundials_attributes(pubsub, target):
    topic, pull = pubsub
    forged = {"sundial_invocation": "forged", "sundial_attempt": "99", "kept": "yes"}
    assert target.deliver(request(topic, attributes=forged)).outcome == "succeeded"
    [message] = pull()
    assert message.attributes["sundial_invocation"] == "inv-0001"
    assert message.attributes["sundial_attempt"] == "1"
    assert message.attributes["kept"] == "yes"


def test_empty_data_still_publishes_because_attributes_are_always_there(pubsub, target):
    topic, pull = pubsub
    assert target.deliver(request(topic, data="")).outcome == "succeeded"
    [message] = pull()
    assert message.data == b"" and message.attributes["sundial_job"] == "billing/fitbit-worker"


def test_a_missing_topic_is_a_failed_attempt_named_by_its_status(pubsub, target):
    result = target.deliver(request(f"projects/{PROJECT}/topics/no-such-topic"))
    assert result.outcome == "failed"
    assert result.reason == "pubsub: NOT_FOUND Topic not found"


def test_an_unreachable_pubsub_is_a_failed_attempt_not_an_exception():
    # A publisher that cannot connect: the future fails, the target reports it.
    from google.api_core import exceptions as gexc

    class Broken:
        def publish(self, topic, data, **attributes):
            raise gexc.ServiceUnavailable("connection refused")

    result = PubSubTarget(publisher=Broken()).deliver(request("projects/p/topics/t"))
    assert (result.outcome, result.reason) == ("failed", "pubsub: UNAVAILABLE connection refused")


def test_a_publish_that_never_resolves_times_out():
    import concurrent.futures

    class Stuck:
        def publish(self, topic, data, **attributes):
            return concurrent.futures.Future()  # never resolves

    result = PubSubTarget(publisher=Stuck(), timeout=timedelta(milliseconds=50)).deliver(
        request("projects/p/topics/t"))
    assert (result.outcome, result.reason) == ("failed", "timeout")


def test_a_pubsub_that_refuses_connections_fails_the_attempt_within_seconds(monkeypatch):
    # The real client against a port nothing listens on: its own retries used to run for
    # 60 s and end as a timeout; now a blip gets two seconds, then the attempt fails.
    import socket
    import time

    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        monkeypatch.setenv("PUBSUB_EMULATOR_HOST", f"127.0.0.1:{closed.getsockname()[1]}")
        began = time.monotonic()
        result = PubSubTarget().deliver(request("projects/p/topics/t"))
    assert result.outcome == "failed" and "connect" in result.reason.lower()
    assert time.monotonic() - began < 4
