"""on_failure and on_recovery in a project file: the hook-only template variables are
accepted in hooks and refused, by name, in a job's target; on_recovery is parsed like
on_failure and sets the policy's flag."""

import pytest

from tests.config.helpers import errors, project

JOB = """
jobs:
  - id: a
    schedule: triggered
    target: {{http: {{url: "https://x.example.com/run", {target}}}}}
{hooks}"""
HOOKS = """    on_failure:
      http: {url: "https://hooks.example.com/f", body: '{"text":"${status} ${reason} ${attempts}"}'}
    on_recovery:
      pubsub: {topic: projects/p/topics/t, data: '${status} ${failures} ${invocationUrl}', attributes: {r: '${reason}'}}
"""


@pytest.mark.parametrize("variable", ["status", "reason", "attempts", "failures", "invocationUrl"])
def test_a_hook_variable_in_a_target_is_an_error_naming_it(variable):
    source = JOB.format(target=f"body: 'x ${{{variable}}}'", hooks="")
    assert errors(source) == [
        f"p.yaml:4: job 'a': target.http.body: ${{{variable}}} is only for on_failure and on_recovery "
        "templates, not for a job's target"]


def test_hook_variables_in_a_target_are_each_named_where_they_are():
    source = JOB.format(target="headers: {X-Why: '${reason}'}, body: '${status}${reason}'", hooks="")
    only = " is only for on_failure and on_recovery templates, not for a job's target"
    assert [error.split(": ", 2)[2] for error in errors(source)] == [
        "target.http.body: ${status}" + only, "target.http.body: ${reason}" + only,
        "target.http.headers.X-Why: ${reason}" + only,
    ]


def test_hook_variables_are_accepted_in_both_hooks():
    config = project(JOB.format(target="body: ''", hooks=HOOKS))
    [job] = config.jobs
    assert job.definition.on_recovery == {"pubsub": {"topic": "projects/p/topics/t",
                                                      "data": "${status} ${failures} ${invocationUrl}",
                                                      "attributes": {"r": "${reason}"}}}
    assert job.policy.notify_failures and job.policy.notify_recoveries
    assert job.definition.to_dict()["on_recovery"] == job.definition.on_recovery


def test_a_job_without_on_recovery_keeps_its_revision_and_flag():
    [job] = project(JOB.format(target="body: ''", hooks="")).jobs
    assert not job.policy.notify_recoveries
    assert "on_recovery" not in job.definition.to_dict()


def test_on_recovery_cannot_have_a_default():
    source = 'defaults: {on_recovery: {noop: {}}}\n' + JOB.format(target="body: ''", hooks="")
    assert errors(source) == ["p.yaml:1: defaults.on_recovery: cannot have a default: on_recovery is set in each job"]
