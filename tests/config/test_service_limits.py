"""The limits that protect the service from one project's jobs (docs/REFERENCE.md section 6):
rates, retries and deadlines, each a located validation error naming its bound."""

from __future__ import annotations

import pytest

from tests.config.helpers import errors


def job(fields: str, target: str = "{noop: {}}", schedule: str = "triggered") -> str:
    return (f"jobs:\n  - id: a\n    schedule: {schedule}\n{fields}"
            f"    target: {target}\n")


@pytest.mark.parametrize("schedule, message", [
    ("every 1ms", "'every' fires at most once per second: the period must be at least 1s, got 1ms"),
    ("every 999ms", "'every' fires at most once per second: the period must be at least 1s, got 999ms"),
])
def test_every_fires_at_most_once_a_second(schedule, message):
    found = errors(job("", schedule=f"'{schedule}'"))
    assert len(found) == 1 and found[0].startswith("p.yaml:3: job 'a': schedule: ") and message in found[0]
    assert errors(job("", schedule="'every 1s'")) == []


@pytest.mark.parametrize("retry, message", [
    ("{min_backoff: 0s}", "retry.min_backoff: must be at least 100ms, got 0s"),
    ("{min_backoff: 99ms}", "retry.min_backoff: must be at least 100ms, got 99ms"),
    ("{max_attempts: 101}", "retry.max_attempts: must be between 1 and 100, got 101"),
    ("{max_attempts: 1000000000}", "retry.max_attempts: must be between 1 and 100, got 1000000000"),
])
def test_retries_have_a_floor_and_a_ceiling(retry, message):
    found = errors(job(f"    retry: {retry}\n"))
    assert len(found) == 1 and found[0].startswith(f"p.yaml:4: job 'a': {message}"), found
    assert errors(job("    retry: {min_backoff: 100ms, max_attempts: 100}\n")) == []


def test_a_defaults_min_backoff_below_the_floor_is_refused():
    source = "defaults:\n  retry: {min_backoff: 10ms}\n" + job("")
    assert errors(source) == ["p.yaml:2: defaults.retry.min_backoff: must be at least 100ms, got 10ms "
                              "(a failing target is not retried flat out)"]


@pytest.mark.parametrize("backend", ["local", "cloud"])
def test_an_invocation_timeout_is_capped(backend):
    assert errors(job("    timeout: 36500d\n"), backend) == [
        f"p.yaml:4: job 'a': timeout: 36500d is more than the 7d an invocation may run on the "
        f"{backend} backend"]
    assert errors(job("    timeout: 7d\n"), backend) == []


@pytest.mark.parametrize("backend, too_long, most, fine", [
    ("local", "1h1m", "1h", "1h"),
    ("cloud", "10m", "9m", "9m"),
])
def test_an_attempt_timeout_is_capped_per_backend(backend, too_long, most, fine):
    target = "{{http: {{url: 'https://x.example.com/', timeout: {}}}}}"
    assert errors(job("", target.format(too_long)), backend) == [
        f"p.yaml:4: job 'a': target.http.timeout: {too_long} is more than the {most} one attempt "
        f"may take on the {backend} backend; for longer work answer 202 and set async: true"]
    assert errors(job("", target.format(fine)), backend) == []
