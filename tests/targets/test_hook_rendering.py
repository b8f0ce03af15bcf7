"""A hook's target rendered for the invocation that ended: the hook variables, JSON
escaping in a JSON body (so a reason quoting the target's answer can neither break the
JSON nor add fields), one-line header values; a job's own target is rendered as before."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from engine.delivery import invocation_url
from engine.rendering import json_body, render_target
from statemachine.durations import parse_instant
from statemachine.template import HookValues, TemplateContext, TemplateError, json_escape, render

ANSWER = 'http 500: {"error":"bad \\"x\\""}\nline 2\\'
HOOK = HookValues("FAILED", ANSWER, attempts=3, failures=2, invocation_url="https://s.example.com/p/b/j/i")
CONTEXT = TemplateContext(parse_instant("2018-03-22T00:09:00Z"), "America/Los_Angeles", project="b",
                          job_id="j", invocation_id="i", hook=HOOK)
SLACK = '{"text":"${jobId} ${status}: ${reason}"}'


def test_the_hook_variables_have_the_ended_invocations_values():
    text = "${status}|${attempts}|${failures}|${invocationUrl}|${processTime}"
    assert render(text, CONTEXT) == "FAILED|3|2|https://s.example.com/p/b/j/i|2018-03-21T17:09:00.000-07:00"


def test_outside_a_hook_a_hook_variable_does_not_render_empty():
    with pytest.raises(TemplateError, match=r"only for on_failure and on_recovery"):
        render("${reason}", TemplateContext(parse_instant("2018-03-22T00:09:00Z")))


def test_a_json_body_gets_escaped_values_and_a_json_content_type():
    [spec] = render_target({"http": {"url": "https://h.example.com", "headers": {}, "body": SLACK}}, CONTEXT).values()
    assert json.loads(spec["body"]) == {"text": f"j FAILED: {ANSWER}"}
    assert spec["headers"] == {"Content-Type": "application/json"}


def test_a_reason_cannot_add_a_field_even_outside_quotes():
    hook = HookValues("FAILED", '1, "admin": true')
    context = TemplateContext(parse_instant("2018-03-22T00:09:00Z"), hook=hook)
    [spec] = render_target({"pubsub": {"topic": "t", "data": '{"n": ${reason}}'}}, context).values()
    with pytest.raises(ValueError):
        json.loads(spec["data"])  # broken, not extended


@pytest.mark.parametrize("headers, body, expected", [
    ({"Content-Type": "application/json"}, ' "${reason}"', True),
    ({"content-type": "application/vnd.api+json; charset=utf-8"}, "x", True),
    ({"Content-Type": "text/plain"}, '{"a":"${reason}"}', False),
    ({}, '  [ "${reason}" ]', True),
    ({}, "reason: ${reason}", False),
    ({"Content-Type": {"secret": "ct"}}, '{"a":1}', True),  # a secret's value is unknown: the body decides
])
def test_when_a_body_is_json(headers, body, expected):
    assert json_body({"headers": headers, "body": body}) is expected


def test_a_plain_body_and_the_url_are_not_escaped_and_headers_stay_on_one_line():
    target = {"http": {"url": "https://h.example.com/${status}", "headers": {"X-Why": "${reason}"},
                       "body": "why: ${reason}"}}
    [spec] = render_target(target, CONTEXT).values()
    assert (spec["url"], spec["body"]) == ("https://h.example.com/FAILED", f"why: {ANSWER}")
    assert spec["headers"] == {"X-Why": ANSWER.replace("\n", " ")}


def test_a_jobs_own_target_renders_as_before():
    target = {"http": {"url": "https://h.example.com", "headers": {}, "body": '{"job":"${jobId}"}'}}
    plain = TemplateContext(parse_instant("2018-03-22T00:09:00Z"), job_id='a"b')
    assert render_target(target, plain)["http"] == {**target["http"], "body": '{"job":"a"b"}'}


def test_the_invocation_url_is_the_ui_page_under_the_service_url():
    assert invocation_url("https://s.example.com/", "b", "j.x", "e5d") == "https://s.example.com/p/b/j.x/e5d"
    assert invocation_url("", "b", "j", "i") == ""


@given(st.text())
def test_any_reason_stays_inside_its_json_string(reason):
    context = TemplateContext(parse_instant("2018-03-22T00:09:00Z"), job_id="j", hook=HookValues("FAILED", reason))
    assert json.loads(render(SLACK, context, json_escape)) == {"text": f"j FAILED: {reason}"}
