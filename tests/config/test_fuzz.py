"""Fuzzing the config loader and the template engine: whatever the input, the
answer is a project, or a clear validation error naming the file and a line, never
another exception. Templates never evaluate anything: rendering gives back the text
with only known variables replaced.

The budget is small in `make test`; SUNDIAL_FUZZ_EXAMPLES=20000 runs a long fuzz."""

from __future__ import annotations

import os
from datetime import datetime, timezone

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from config.loader import parse_project_text
from config.model import ConfigError, ProjectConfigError
from statemachine.template import TemplateContext, TemplateError, render, validate_template

EXAMPLES = int(os.environ.get("SUNDIAL_FUZZ_EXAMPLES", "300"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))

# Building blocks that reach deep into validation, mixed with noise.
FIELDS = ["id", "schedule", "at", "timezone", "disabled", "overlap", "max_concurrent", "catchup",
          "timeout", "retry", "fanout", "throttle", "triggers", "target", "http", "url", "method",
          "headers", "body", "pubsub", "topic", "data", "attributes", "cloud_tasks", "queue",
          "noop", "async", "policy", "window", "max_attempts", "min_backoff", "max_backoff",
          "count", "spread", "jobs", "acl", "readers", "owners", "defaults", "throttles",
          "allowed_hosts", "max_in_flight", "pause_after_failures", "on_failure"]
WORDS = ["every 10s", "0 0 * * * ?", "*/5 * * * *", "@daily", "triggered", "continuously",
         "with 5m interval", "L W", "5#3", "2026-01-01T00:00:00Z", "America/Los_Angeles",
         "Mars/Olympus", "skip", "allow", "latest", "all", "1h30m", "-1s", "http://127.0.0.1/x",
         "http://169.254.169.254/", "https://e.example.com/${startOfDay}", "${nope}", "${",
         "$${x}", "a\r\nInjected: 1", "job-1", "job-2", "user:a@b.c", "group:x", "anonymous", ""]
scalars = st.one_of(st.sampled_from(WORDS), st.integers(-10**12, 10**12), st.booleans(),
                    st.none(), st.floats(allow_nan=True), st.text(max_size=20))
documents = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4),
                            st.dictionaries(st.one_of(st.sampled_from(FIELDS), st.text(max_size=8)),
                                            inner, max_size=6)),
    max_leaves=40,
)


def _parse(text: str) -> None:
    try:
        parse_project_text("fuzz", text, "fuzz.yaml")
    except ProjectConfigError as error:
        assert error.errors, "an error must say what is wrong"
        for each in error.errors:
            assert isinstance(each, ConfigError)
            assert each.file == "fuzz.yaml" and each.line >= 1 and each.message


@FUZZ
@given(documents)
def test_any_structured_document_loads_or_fails_with_a_located_error(document):
    _parse(yaml.safe_dump({"jobs": [document]} if isinstance(document, dict) else document))


@FUZZ
@given(st.text(alphabet=st.sampled_from(list("jobs:- id{}[]\"'&*!|>#%@`\n\t ,?0123456789xyz\\$\x00\x07\r\ufeff\x85")),
               max_size=200))
def test_any_text_loads_or_fails_with_a_located_error(text):
    _parse(text)


def test_a_control_character_is_a_located_error_not_a_crash():
    # Found by schemathesis: POST /validate with the body "\x00" answered 500.
    for text, line in (("\x00", 1), ("jobs:\n  - id: a\x07b\n", 2)):
        try:
            parse_project_text("fuzz", text, "fuzz.yaml")
        except ProjectConfigError as error:
            assert "is not allowed" in error.errors[0].message
            assert error.errors[0].line == line
        else:
            raise AssertionError(f"{text!r} must not load")


def test_yaml_tags_that_would_build_objects_are_refused_not_run():
    text = "jobs: !!python/object/apply:os.system ['touch /tmp/sundial-pwned']\n"
    try:
        parse_project_text("fuzz", text, "fuzz.yaml")
    except ProjectConfigError as error:
        assert error.errors[0].line == 1
    else:
        raise AssertionError("a python tag must not load")
    assert not os.path.exists("/tmp/sundial-pwned")


CONTEXT = TemplateContext(datetime(2026, 3, 8, 10, 0, tzinfo=timezone.utc), "America/Los_Angeles",
                          "p", "j", "inv-1", 1, 0, 1)


@FUZZ
@given(st.lists(st.sampled_from(list("${}ab_.() \n") + ["${startOfDay}", "${__import__}", "${jobId}",
                                                          "$${", "${eventIndex}"]), max_size=30)
       .map("".join))
def test_a_template_renders_or_fails_validation_and_never_evaluates(text):
    try:
        validate_template(text)
    except TemplateError as error:
        assert str(error)
        return
    out = render(text, CONTEXT)
    # Substitution only: whatever is left of the text came from it literally.
    assert "__import__" not in out or "__import__" in text
