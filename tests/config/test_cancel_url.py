"""An http target's `cancel_url`: for an async target only, checked by the same address
rules as `url` (allowed_hosts lifts them), and kept in the definition only when given, so
that a release that does not know the field still reads the jobs that do not use it."""

from tests.config.helpers import errors, project
from tests.config.test_target_errors import job


def test_cancel_url_needs_an_async_target():
    assert errors(job("http: {url: 'https://x.example.com/run', cancel_url: 'https://x.example.com/stop'}")) == [
        "p.yaml:6: job 'a': target.http.cancel_url: cancel_url is for an async target: set async: true"]


def test_cancel_url_follows_the_address_rules_of_url():
    source = job("http: {url: 'https://x.example.com/run', async: true, cancel_url: 'http://169.254.169.254/x'}")
    assert errors(source) == [
        "p.yaml:6: job 'a': target.http.cancel_url: host 169.254.169.254 is a link-local address, "
        "refused as a target unless the project's allowed_hosts lists '169.254.169.254'"]
    listed = job("http: {url: 'https://x.example.com/run', async: true, cancel_url: 'http://169.254.169.254/x'}",
                 top="allowed_hosts: ['169.254.169.254']")
    assert errors(listed) == []


def test_cancel_url_is_in_the_definition_only_when_given():
    given = project(job("http: {url: 'https://x.example.com/run', async: true, "
                        "cancel_url: 'https://x.example.com/stop/${jobId}'}"))
    assert given.jobs[0].definition.target["http"]["cancel_url"] == "https://x.example.com/stop/${jobId}"
    plain = project(job("http: {url: 'https://x.example.com/run', async: true}"))
    assert "cancel_url" not in plain.jobs[0].definition.target["http"]
