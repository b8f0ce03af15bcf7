"""`triggers` entries with a condition in a project file: their form in the definition and
the policy, their errors (exact line and text), and cycles through any condition."""

import pytest

from statemachine.definition import JobDefinition
from tests.config.helpers import errors, project

JOBS = """
    jobs:
      - id: a
        schedule: "@daily"
        triggers: {triggers}
        target: {{noop: {{}}}}
      - id: b
        schedule: triggered
        target: {{noop: {{}}}}
      - id: c
        schedule: triggered
        target: {{noop: {{}}}}
    """


def _jobs(triggers: str) -> str:
    return JOBS.format(triggers=triggers)


def test_conditions_split_into_the_policy_and_stay_in_the_definition():
    job = project(_jobs("[b, {job: c, on: failed}, {job: b, on: finished}]")).jobs[0]
    assert (job.policy.triggers, job.policy.triggers_on_failure) == (("b",), ("c", "b"))
    stored = job.definition.to_dict()
    assert stored["triggers"] == ["b", {"job": "c", "on": "failed"}, {"job": "b", "on": "finished"}]
    assert JobDefinition.from_dict(stored).to_dict() == stored
    assert job.definition.trigger_targets == ("b", "c")


def test_on_succeeded_is_stored_as_the_plain_id_and_keeps_the_revision():
    plain, spelled = project(_jobs("[b]")).jobs[0], project(_jobs("[{job: b, on: succeeded}]")).jobs[0]
    assert spelled.definition.to_dict()["triggers"] == ["b"]
    assert spelled.policy.revision == plain.policy.revision
    assert spelled.policy.triggers_on_failure == ()


@pytest.mark.parametrize("triggers, expected", [
    ("[{job: b, on: maybe}]", "p.yaml:4: job 'a': triggers[0].on: 'maybe' is not one of succeeded, failed, finished"),
    ("[{on: failed}]", "p.yaml:4: job 'a': triggers[0]: needs job, e.g. {job: notify-failure, on: failed}"),
    ("[{job: nope, on: failed}]", "p.yaml:4: job 'a': triggers[0]: unknown job 'nope' in this project"),
    ("[{job: b, when: failed}]", "p.yaml:4: job 'a': unknown field 'triggers[0].when'; expected one of: job, on"),
])
def test_errors(triggers, expected):
    assert errors(_jobs(triggers)) == [expected]


def test_a_cycle_through_a_failure_condition_is_an_error():
    found = errors("""
    jobs:
      - id: a
        schedule: "@daily"
        triggers: [{job: b, on: failed}]
        target: {noop: {}}
      - id: b
        schedule: triggered
        triggers: [{job: a, on: finished}]
        target: {noop: {}}
    """)
    assert found == ["p.yaml:8: job 'b': trigger cycle: a -> b -> a"]
