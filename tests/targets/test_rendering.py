"""render_target: template values in url, header values, body, data, attribute values."""

from __future__ import annotations

import copy

import pytest

from engine.rendering import HeaderInjectionError, render_target
from statemachine.durations import parse_instant
from statemachine.template import TemplateContext, TemplateError

# The contract's seed example: 17:09 in Seattle on 2018-03-21.
CONTEXT = TemplateContext(
    parse_instant("2018-03-22T00:09:00Z"),
    "America/Los_Angeles",
    project="billing",
    job_id="exporter-hourly",
    invocation_id="inv-0001",
    attempt=2,
    event_index=1,
    event_count=3,
)


def test_http_target_renders_url_header_values_and_body_only():
    target = {
        "http": {
            "url": "https://x.example.com/run?day=${todaysDate}&job=${jobId}",
            "method": "POST",
            "headers": {"Content-Type": "application/json", "X-Hour-${attempt}": "${startOfHour}"},
            "body": '{"endDateTime":"${startOfHour}","from":"${startOfPreviousDay}"}',
            "timeout": "60s",
            "async": False,
        }
    }
    assert render_target(target, CONTEXT) == {
        "http": {
            "url": "https://x.example.com/run?day=2018-03-21&job=exporter-hourly",
            "method": "POST",
            "headers": {
                "Content-Type": "application/json",
                "X-Hour-${attempt}": "2018-03-21T17:00:00.000-07:00",  # names are not templates
            },
            "body": '{"endDateTime":"2018-03-21T17:00:00.000-07:00",'
            '"from":"2018-03-20T00:00:00.000-07:00"}',
            "timeout": "60s",
            "async": False,
        }
    }


def test_pubsub_renders_data_and_attribute_values():
    target = {
        "pubsub": {
            "topic": "projects/P/topics/${jobId}",
            "data": '{"date":"${yesterdaysDate}","at":"${scheduledTime}"}',
            "attributes": {"event": "${eventIndex}/${eventCount}", "n": 3},
        }
    }
    assert render_target(target, CONTEXT) == {
        "pubsub": {
            "topic": "projects/P/topics/${jobId}",  # configuration, not payload
            "data": '{"date":"2018-03-20","at":"2018-03-22T00:09:00.000Z"}',
            "attributes": {"event": "1/3", "n": 3},
        }
    }


def test_cloud_tasks_and_noop():
    target = {
        "cloud_tasks": {
            "queue": "projects/P/locations/L/queues/Q",
            "url": "https://w.example.com/notify/${invocationId}",
            "body": '{"p":"${project}"}',
            "headers": {"X-Day": "${processTime}"},
        }
    }
    assert render_target(target, CONTEXT)["cloud_tasks"] == {
        "queue": "projects/P/locations/L/queues/Q",
        "url": "https://w.example.com/notify/inv-0001",
        "body": '{"p":"billing"}',
        "headers": {"X-Day": "2018-03-21T17:09:00.000-07:00"},
    }
    assert render_target({"noop": {}}, CONTEXT) == {"noop": {}}


def test_escape_and_single_pass():
    target = {"http": {"url": "http://h/", "body": "$${startOfHour} ${$${x}"}}
    with pytest.raises(TemplateError):
        render_target(target, CONTEXT)
    target = {"http": {"url": "http://h/", "body": "$${startOfHour} is ${startOfHour}"}}
    rendered = render_target(target, CONTEXT)["http"]["body"]
    assert rendered == "${startOfHour} is 2018-03-21T17:00:00.000-07:00"


def test_input_is_not_changed_and_output_shares_nothing():
    target = {"http": {"url": "http://h/${jobId}", "headers": {"A": "b"}, "extra": {"x": [1]}}}
    before = copy.deepcopy(target)
    rendered = render_target(target, CONTEXT)
    assert target == before
    rendered["http"]["extra"]["x"].append(2)
    rendered["http"]["headers"]["A"] = "changed"
    assert target == before


def test_unknown_variable_is_an_error():
    with pytest.raises(TemplateError, match="unknown variable"):
        render_target({"http": {"url": "http://h/${nope}"}}, CONTEXT)


@pytest.mark.parametrize("value", ["a\r\nX-Evil: 1", "${todaysDate}\nX-Evil: 1", "x\ry"])
def test_line_break_in_a_header_value_is_refused(value):
    target = {"http": {"url": "http://h/", "headers": {"X-Day": value}}}
    with pytest.raises(HeaderInjectionError, match="X-Day"):
        render_target(target, CONTEXT)


def test_line_break_in_a_header_name_is_refused():
    target = {"cloud_tasks": {"url": "http://h/", "headers": {"X-A\r\nX-B": "v"}}}
    with pytest.raises(ValueError, match="line break"):
        render_target(target, CONTEXT)


def test_line_breaks_are_fine_in_bodies_and_attributes():
    target = {"pubsub": {"data": "a\nb", "attributes": {"k": "c\r\nd"}}}
    assert render_target(target, CONTEXT) == target
