"""What validation works out once and shares (config/jobs.py, config/targets.py) gives
each job what checking it alone gives: jobs that differ only in a field a shortcut must
not merge come out different, and errors read as they do without the shortcut."""

from __future__ import annotations

from urllib.parse import urlsplit

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import config.addresses as targets
from tests.config.helpers import errors, project


def _entry(job_id: str, url: str, extra: str = "") -> str:
    return f"  - id: {job_id}\n    schedule: '0 9 * * *'\n{extra}    target: {{http: {{url: '{url}'}}}}\n"


def test_urls_with_a_host_seen_before_are_each_checked_in_full():
    # The host is looked at once per scheme://host:port; path, query and fragment are each job's own.
    source = "jobs:\n" + "".join([
        _entry("a", "http://h.example.com/a"), _entry("b", "http://h.example.com/b?q=1#f"),
        _entry("c", "http://h.example.com:8o/a"), _entry("d", "http://h.example.com:80/a"),
        _entry("e", "ftp://h.example.com/a"), _entry("f", "HTTPS://h.example.com?x"),
        _entry("g", "http://169.254.169.254/a"), _entry("h", "http://169.254.169.254#x"),
        _entry("i", "http:/h.example.com/a"),
    ])
    config = project(source)
    assert {job.id: job.definition.target["http"]["url"] for job in config.jobs} == {
        "a": "http://h.example.com/a", "b": "http://h.example.com/b?q=1#f", "d": "http://h.example.com:80/a",
        "f": "HTTPS://h.example.com?x"}
    assert [str(e).split(": ", 1)[1] for e in config.job_errors] == [
        "job 'c': target.http.url: 'http://h.example.com:8o/a' has a bad host or port",
        "job 'e': target.http.url: 'ftp://h.example.com/a' is not an http:// or https:// URL",
        "job 'g': target.http.url: host 169.254.169.254 is a link-local address, refused as a target "
        "unless the project's allowed_hosts lists '169.254.169.254'",
        "job 'h': target.http.url: host 169.254.169.254 is a link-local address, refused as a target "
        "unless the project's allowed_hosts lists '169.254.169.254'",
        "job 'i': target.http.url: 'http:/h.example.com/a' has no host"]


def test_a_bracketed_host_urlsplit_refuses_raises_as_urlsplit_does():
    for url in ("http://[::1/x", "http://[zz]/x"):
        with pytest.raises(ValueError):
            urlsplit(url)
        with pytest.raises(ValueError):
            targets._split_host(targets._HEAD.match(url).group())


@settings(max_examples=400, deadline=None)
@given(st.sampled_from(["http", "HTTPS", "h+t.p", "ftp"]),
       st.text(st.sampled_from("ab1.:@[]%-_\u00e9"), max_size=12),
       st.text(st.sampled_from("/?#=a&"), max_size=6))
def test_the_head_of_a_url_reads_as_the_whole_url_does(scheme, netloc, rest):
    url = f"{scheme}://{netloc}{rest}"
    head = targets._HEAD.match(url)
    assert head is not None
    try:
        whole = targets._split_host(url)
    except ValueError:
        with pytest.raises(ValueError):
            targets._split_host(head.group())
        return
    assert targets._split_host(head.group()) == whole


def test_jobs_setting_a_shared_field_do_not_change_what_the_others_get():
    config = project("""
        defaults: {retry: {max_attempts: 2}, timezone: Europe/Berlin}
        jobs:
          - id: a
            schedule: '0 9 * * *'
            retry: {min_backoff: 30s}
            timeout: 5m
            catchup: {policy: none}
            target: {noop: {}}
          - id: b
            schedule: '0 9 * * *'
            target: {noop: {}}
          - id: c
            schedule: '0 9 * * *'
            timezone: UTC
            target: {noop: {}}
    """)
    a, b, c = (job.definition for job in config.jobs)
    assert (a.retry.max_attempts, a.retry.min_backoff, a.timeout, a.catchup.policy.value, a.timezone) == \
        (2, "30s", "5m", "none", "Europe/Berlin")
    assert (b.retry.max_attempts, b.retry.min_backoff, b.timeout, b.catchup.policy.value, b.timezone) == \
        (2, "1s", "10m", "latest", "Europe/Berlin")
    assert (c.retry, c.timeout, c.timezone) == (b.retry, b.timeout, "UTC")
    assert len({a.canonical_json, b.canonical_json, c.canonical_json}) == 3


def test_an_unknown_field_is_still_named_with_its_hint():
    assert errors("""
        jobs:
          - id: a
            schedule: '0 9 * * *'
            retyr: {max_attempts: 2}
            target: {http: {url: 'http://h/x', bdy: x}}
    """) == ["p.yaml:4: job 'a': unknown field 'retyr' (did you mean 'retry'?)",
             "p.yaml:5: job 'a': unknown field 'target.http.bdy' (did you mean 'body'?)"]
