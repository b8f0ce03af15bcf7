"""Valid configs: the model they load into, defaults, revisions, files and the API entry."""

import hashlib
from datetime import datetime, timedelta, timezone

import pytest

from config.loader import load_project_file, parse_job_entry, parse_project_text
from config.model import ConfigError, ProjectConfigError
from statemachine.definition import RetrySpec
from statemachine.policy import Catchup, FanoutPolicy, JobPolicy, Overlap, RetryPolicy
from tests.config.helpers import NAME, project, text

# A project file that uses every top-level field and every target kind.
CONTRACT_EXAMPLE = """
allowed_hosts: [metadata.example.internal]   # targets allowed despite section 6; optional
acl:                                # who may do what (section 6); optional
  readers: [group:everyone]
  triggerers: [user:ops@example.com]
  owners: [user:alice@example.com]
defaults:                           # applied to every job unless it overrides; optional
  timezone: America/Los_Angeles
throttles:                          # named limits shared by jobs; optional
  backup-consumers: {max_in_flight: 20}
jobs:
  - id: exporter-hourly             # ^[A-Za-z0-9_.-]{1,100}$, unique in the project
    schedule: "0 0 * * * ?"         # section 3
    timezone: UTC                   # IANA name; default UTC
    disabled: false
    overlap: skip                   # skip | buffer_one | buffer_all | allow (then max_concurrent: N)
    catchup: {policy: latest, window: 1h}   # none | latest | all
    timeout: 10m                    # deadline of one invocation
    retry: {max_attempts: 3, min_backoff: 1s, max_backoff: 5m}
    fanout: {count: 1, spread: 0s}  # N events per occurrence, staggered over spread
    throttle: backup-consumers
    triggers: [fitbit-worker]       # jobs to trigger when this one succeeds
    target:                         # exactly one of http | pubsub | cloud_tasks | noop
      http:
        url: https://exporter.example.com/run
        method: POST
        headers: {Content-Type: application/json}
        body: '{"endDateTime":"${startOfHour}"}'
        timeout: 60s
        async: false
  - id: fitbit-worker
    schedule: "0 0 3 * * ?"
    target:
      pubsub: {topic: projects/P/topics/T, data: '{"date":"${yesterdaysDate}"}', attributes: {}}
  - id: training-invitations
    at: ["2020-12-24T14:00:00Z", "2020-12-25T14:00:00Z"]   # one-off times instead of schedule
    target:
      cloud_tasks: {queue: projects/P/locations/L/queues/Q, url: https://w.example.com/notify, body: '{"id":"t-1"}'}
"""

COMMON = {"disabled": False, "overlap": "skip", "max_concurrent": 1,
          "catchup": {"policy": "latest", "window": "1h"}, "timeout": "10m",
          "fanout": {"count": 1, "spread": "0s"}}
DEFAULT_RETRY = {"max_attempts": 1, "min_backoff": "1s", "max_backoff": "5m"}


def test_the_contract_example_loads_into_the_expected_model():
    config = parse_project_text("bridge", CONTRACT_EXAMPLE, "bridge.yaml")
    assert config.project == "bridge" and config.path == "bridge.yaml"
    assert config.job_errors == ()
    assert config.acl == {"readers": ["group:everyone"], "triggerers": ["user:ops@example.com"],
                          "owners": ["user:alice@example.com"]}
    assert config.allowed_hosts == ("metadata.example.internal",)
    assert config.throttles == {"backup-consumers": 20}
    assert config.defaults == {"timezone": "America/Los_Angeles"}
    assert config.content_hash == hashlib.sha256(CONTRACT_EXAMPLE.encode()).hexdigest()
    exporter, fitbit, invitations = config.jobs
    assert (exporter.line, fitbit.line, invitations.line) == (12, 31, 35)
    assert exporter.definition.to_dict() == {
        "id": "exporter-hourly", "schedule": "0 0 * * * ?", "timezone": "UTC", **COMMON,
        "retry": {"max_attempts": 3, "min_backoff": "1s", "max_backoff": "5m"},
        "throttle": "backup-consumers", "triggers": ["fitbit-worker"],
        "target": {"http": {"url": "https://exporter.example.com/run", "method": "POST",
                            "headers": {"Content-Type": "application/json"},
                            "body": '{"endDateTime":"${startOfHour}"}', "timeout": "1m",
                            "async": False}},
    }
    assert fitbit.definition.to_dict() == {
        "id": "fitbit-worker", "schedule": "0 0 3 * * ?", "timezone": "America/Los_Angeles",
        **COMMON, "retry": DEFAULT_RETRY, "throttle": None, "triggers": [],
        "target": {"pubsub": {"topic": "projects/P/topics/T",
                              "data": '{"date":"${yesterdaysDate}"}', "attributes": {}}},
    }
    assert invitations.definition.to_dict() == {
        "id": "training-invitations", "at": ["2020-12-24T14:00:00Z", "2020-12-25T14:00:00Z"],
        "timezone": "America/Los_Angeles", **COMMON, "retry": DEFAULT_RETRY,
        "throttle": None, "triggers": [],
        "target": {"cloud_tasks": {"queue": "projects/P/locations/L/queues/Q",
                                   "url": "https://w.example.com/notify", "method": "POST",
                                   "headers": {}, "body": '{"id":"t-1"}'}},
    }


def test_the_contract_example_policies():
    exporter, fitbit, invitations = parse_project_text("b", CONTRACT_EXAMPLE, "b.yaml").jobs
    assert exporter.policy == JobPolicy(
        schedule_text="0 0 * * * ?", timezone="UTC", at=(), overlap=Overlap.SKIP,
        max_concurrent=1, catchup=Catchup.LATEST, catchup_window=timedelta(hours=1),
        timeout=timedelta(minutes=10), attempt_timeout=timedelta(seconds=60),
        retry=RetryPolicy(3, timedelta(seconds=1), timedelta(minutes=5)),
        fanout=FanoutPolicy(1, timedelta(0)), triggers=("fitbit-worker",), throttle="backup-consumers",
        revision=exporter.policy.revision)
    assert len(exporter.policy.revision) == 16
    assert fitbit.policy.timezone == "America/Los_Angeles"
    assert fitbit.policy.retry == RetryPolicy()
    utc = timezone.utc
    assert invitations.policy.at == (datetime(2020, 12, 24, 14, tzinfo=utc),
                                     datetime(2020, 12, 25, 14, tzinfo=utc))
    assert invitations.policy.schedule_text == ""
    assert invitations.policy.schedule.times == invitations.policy.at


MINIMAL = """
    jobs:
      - id: a
        schedule: "@hourly"
        target: {http: {url: "https://x.example.com/"}}
    """


def test_builtin_defaults():
    job = project(MINIMAL).jobs[0]
    assert job.disabled is False
    assert job.definition.to_dict() == {
        "id": "a", "schedule": "@hourly", "timezone": "UTC", **COMMON,
        "retry": DEFAULT_RETRY, "throttle": None, "triggers": [],
        "target": {"http": {"url": "https://x.example.com/", "method": "POST", "headers": {},
                            "body": "", "timeout": "1m", "async": False}},
    }
    policy = job.policy
    assert policy == JobPolicy(schedule_text="@hourly", revision=policy.revision)


DEFAULTS = """
    throttles:
      db: {max_in_flight: 2}
    defaults:
      timezone: Europe/Berlin
      disabled: true
      overlap: allow
      max_concurrent: 4
      catchup: {policy: all, window: 6h}
      timeout: 1h
      retry: {max_attempts: 5, max_backoff: 1h}
      fanout: {count: 3}
      throttle: db
      triggers: [sink]
    jobs:
      - id: inherits
        schedule: "@daily"
        target: {noop: {}}
      - id: overrides
        schedule: "@daily"
        timezone: UTC
        disabled: false
        overlap: skip
        catchup: {window: 30m}
        timeout: 5m
        retry: {min_backoff: 2s}
        fanout: {spread: 1m}
        throttle: null
        triggers: []
        target: {noop: {}}
      - id: sink
        schedule: triggered
        triggers: []
        target: {noop: {}}
    """


def test_defaults_apply_and_nested_maps_combine_field_by_field():
    config = project(DEFAULTS)
    inherits, overrides, _ = (job.definition.to_dict() for job in config.jobs)
    assert config.defaults == {
        "timezone": "Europe/Berlin", "disabled": True, "overlap": "allow", "max_concurrent": 4,
        "catchup": {"policy": "all", "window": "6h"}, "timeout": "1h",
        "retry": {"max_attempts": 5, "max_backoff": "1h"}, "fanout": {"count": 3},
        "throttle": "db", "triggers": ["sink"]}
    assert {key: inherits[key] for key in config.defaults} == {
        "timezone": "Europe/Berlin", "disabled": True, "overlap": "allow", "max_concurrent": 4,
        "catchup": {"policy": "all", "window": "6h"}, "timeout": "1h",
        "retry": {"max_attempts": 5, "min_backoff": "1s", "max_backoff": "1h"},
        "fanout": {"count": 3, "spread": "0s"}, "throttle": "db", "triggers": ["sink"]}
    # A null throttle means "not set", so the default still applies.
    assert {key: overrides[key] for key in config.defaults} == {
        "timezone": "UTC", "disabled": False, "overlap": "skip", "max_concurrent": 1,
        "catchup": {"policy": "all", "window": "30m"}, "timeout": "5m",
        "retry": {"max_attempts": 5, "min_backoff": "2s", "max_backoff": "1h"},
        "fanout": {"count": 3, "spread": "1m"}, "throttle": "db", "triggers": []}
    assert config.jobs[0].disabled is True and config.jobs[1].disabled is False
    assert config.jobs[0].policy.concurrency_limit() == 4


def test_max_concurrent_takes_effect_only_with_allow():
    config = project("""
        jobs:
          - id: a
            schedule: triggered
            overlap: allow
            max_concurrent: 3
            target: {noop: {}}
          - id: b
            schedule: triggered
            overlap: buffer_all
            max_concurrent: 1
            target: {noop: {}}
        """)
    assert [job.policy.max_concurrent for job in config.jobs] == [3, 1]
    assert config.job_errors == ()


def test_schedules_are_kept_as_written_apart_from_spacing():
    config = project("""
        jobs:
          - id: a
            schedule: "  every   90m  offset 5m "
            target: {noop: {}}
        """)
    assert config.jobs[0].definition.schedule == "every 90m offset 5m"
    assert config.jobs[0].policy.schedule_text == "every 90m offset 5m"


def test_at_times_are_normalized_sorted_and_deduplicated():
    config = project("""
        jobs:
          - id: a
            at:
              - 2027-01-04T10:00:00+01:00
              - "2027-01-03T09:00:00.250Z"
              - 2027-01-04T09:00:00Z
            target: {noop: {}}
        """)
    assert config.jobs[0].definition.at == ("2027-01-03T09:00:00.250000Z",
                                            "2027-01-04T09:00:00Z")


# --- revisions -----------------------------------------------------------------------

REVISED = """
    jobs:
      - id: a
        schedule: "@daily"
        retry: {max_attempts: 3, max_backoff: 1m}
        target: {http: {url: "https://x.example.com/", headers: {A: "1", B: "2"}}}
    """
REFORMATTED = """
    # the same job, written differently
    jobs:
    - target:
        http:
          headers:
            B: "2"
            A: "1"
          url:   https://x.example.com/
          method: post
      retry:
        max_backoff: 60s
        max_attempts: 3
      schedule: '@daily'
      timezone: UTC
      id: a
    """


def test_revision_is_stable_across_key_order_spelling_and_whitespace():
    first, second = project(REVISED).jobs[0], project(REFORMATTED).jobs[0]
    assert first.definition == second.definition
    assert first.policy.revision == second.policy.revision


@pytest.mark.parametrize("change", [
    ("max_attempts: 3", "max_attempts: 4"),
    ('"2"', '"3"'),
    ('"@daily"', '"@hourly"'),
    ("max_backoff: 1m", "max_backoff: 2m"),
])
def test_revision_changes_when_a_field_changes(change):
    changed = project(REVISED.replace(*change)).jobs[0].policy.revision
    assert changed != project(REVISED).jobs[0].policy.revision


def test_revision_changes_when_a_default_changes_the_job():
    plain = project(REVISED).jobs[0].policy.revision
    assert project("defaults: {timeout: 1m}\n" + text(REVISED)).jobs[0].policy.revision != plain


# --- the import rules ----------------------------------------------------------------

def test_a_bad_job_leaves_the_others_loaded():
    config = project("""
        jobs:
          - id: good
            schedule: "@daily"
            target: {noop: {}}
          - id: bad
            schedule: "@daily"
            overlap: sometimes
            target: {noop: {}}
          - id: also-good
            schedule: triggered
            target: {noop: {}}
        """)
    assert [job.id for job in config.jobs] == ["good", "also-good"]
    assert config.job_errors == (ConfigError(
        NAME, 7, "job 'bad': overlap: 'sometimes' is not one of skip, buffer_one, "
                 "buffer_all, allow, replace"),)
    assert config.job_errors[0].job == "bad"
    assert config.broken_job_ids == {"bad"}
    assert config.job("also-good").line == 9 and config.job("bad") is None


@pytest.mark.parametrize("source", ["", "# nothing yet\n", "jobs:\n", "jobs: []\n"])
def test_a_project_may_have_no_jobs(source):
    config = parse_project_text("p", source, NAME)
    assert config.jobs == () and config.job_errors == ()
    assert config.acl == {"readers": [], "triggerers": [], "owners": []}


def test_settings_are_json_ready():
    config = parse_project_text("b", CONTRACT_EXAMPLE, "b.yaml")
    assert config.settings() == {
        "acl": config.acl, "allowed_hosts": ["metadata.example.internal"],
        "throttles": {"backup-consumers": 20}, "defaults": {"timezone": "America/Los_Angeles"}}


def test_error_str_is_file_line_message():
    assert str(ConfigError("a.yaml", 3, "boom")) == "a.yaml:3: boom"
    failure = ProjectConfigError([ConfigError("a.yaml", 3, "boom"), ConfigError("a.yaml", 4, "x")])
    assert str(failure) == "a.yaml:3: boom\na.yaml:4: x"


def test_backend_must_be_known():
    with pytest.raises(ValueError):
        parse_project_text("p", "jobs: []\n", NAME, backend="gae")


# --- files ---------------------------------------------------------------------------

def test_load_project_file(tmp_path):
    path = tmp_path / "team-a.yaml"
    path.write_bytes(b"\xef\xbb\xbf" + text(MINIMAL).encode())  # with a byte-order mark
    config = load_project_file(path)
    assert config.project == "team-a" and config.path == str(path)
    assert config.content_hash == hashlib.sha256(path.read_bytes()).hexdigest()
    assert [job.id for job in config.jobs] == ["a"]


def test_load_missing_file(tmp_path):
    path = tmp_path / "gone.yaml"
    with pytest.raises(ProjectConfigError) as failure:
        load_project_file(path)
    assert [str(e) for e in failure.value.errors] == [
        f"{path}:1: cannot read: No such file or directory"]


def test_load_file_that_is_not_utf8(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_bytes(b"jobs: []\n# caf\xe9\n")
    with pytest.raises(ProjectConfigError) as failure:
        load_project_file(path)
    assert [str(e) for e in failure.value.errors] == [
        f"{path}:2: not UTF-8 text: byte 0xe9 cannot be decoded"]


def test_load_file_with_a_bad_project_name(tmp_path):
    path = tmp_path / "Team_A.yaml"
    path.write_text("jobs: []\n")
    with pytest.raises(ProjectConfigError) as failure:
        load_project_file(path)
    assert failure.value.errors[0].message.startswith("project id 'Team_A' (the file name")


# --- one entry through the API -------------------------------------------------------

ENTRY = {"schedule": "every 10m", "retry": {"max_attempts": 2},
         "target": {"http": {"url": "https://x.example.com/run", "body": "${scheduledTime}"}}}


def test_parse_job_entry_without_a_project():
    job = parse_job_entry(ENTRY, None, "api-job")
    assert job.id == "api-job" and job.line == 0
    assert job.definition.id == "api-job"
    assert job.definition.retry == RetrySpec(max_attempts=2, min_backoff="1s", max_backoff="5m")


def test_parse_job_entry_applies_the_project_defaults_and_rules():
    config = parse_project_text("b", CONTRACT_EXAMPLE, "b.yaml")
    for owner in (config, config.settings()):
        job = parse_job_entry({**ENTRY, "throttle": "backup-consumers"}, owner, "api-job")
        assert job.definition.timezone == "America/Los_Angeles"
        assert job.definition.throttle == "backup-consumers"


def test_parse_job_entry_errors_have_line_zero():
    config = parse_project_text("b", CONTRACT_EXAMPLE, "b.yaml")
    entry = {**ENTRY, "throttle": "nope", "triggers": ["ghost"], "overlap": "x"}
    with pytest.raises(ProjectConfigError) as failure:
        parse_job_entry(entry, config, "api-job", known_jobs={"exporter-hourly", "api-job"})
    assert [str(e) for e in failure.value.errors] == [
        "<api>:0: job 'api-job': overlap: 'x' is not one of skip, buffer_one, buffer_all, "
        "allow, replace",
        "<api>:0: job 'api-job': throttle: unknown throttle 'nope' (the project's throttles: "
        "backup-consumers)",
        "<api>:0: job 'api-job': triggers[0]: unknown job 'ghost' in this project",
    ]
    assert {error.job for error in failure.value.errors} == {"api-job"}


@pytest.mark.parametrize("entry, job_id, message", [
    ("not a map", "j", "<api>:0: job 'j': expected a map, e.g. {schedule: ..., target: ...}, "
                       "got string 'not a map'"),
    ({**ENTRY, "id": "other"}, "j", "<api>:0: job 'j': id: 'other' does not match the job id "
                                    "'j'"),
    (ENTRY, "bad id", "<api>:0: 'bad id' is not a valid job id: use 1 to 100 letters, "
                      "digits, '_', '.' or '-', not only dots"),
    (ENTRY, ".", "<api>:0: '.' is not a valid job id: use 1 to 100 letters, "
                 "digits, '_', '.' or '-', not only dots"),
    (ENTRY, "...", "<api>:0: '...' is not a valid job id: use 1 to 100 letters, "
                   "digits, '_', '.' or '-', not only dots"),
    ({**ENTRY, "target": {"http": {"url": "http://169.254.169.254/"}}}, "j",
     "<api>:0: job 'j': target.http.url: host 169.254.169.254 is a link-local address, "
     "refused as a target unless the project's allowed_hosts lists '169.254.169.254'"),
])
def test_parse_job_entry_refuses(entry, job_id, message):
    with pytest.raises(ProjectConfigError) as failure:
        parse_job_entry(entry, None, job_id)
    assert [str(e) for e in failure.value.errors] == [message]


def test_parse_job_entry_accepts_its_own_id_and_the_cloud_rules():
    assert parse_job_entry({**ENTRY, "id": "j"}, None, "j").id == "j"
    local = {**ENTRY, "target": {"http": {"url": "http://127.0.0.1:9/"}}}
    assert parse_job_entry(local, None, "j").id == "j"
    with pytest.raises(ProjectConfigError):
        parse_job_entry(local, None, "j", backend="cloud")


def test_a_definition_parses_back_to_itself():
    config = parse_project_text("b", CONTRACT_EXAMPLE, "b.yaml")
    for job in config.jobs + project(DEFAULTS).jobs:
        again = parse_job_entry(job.definition.to_dict(), None, job.id)
        assert again.definition == job.definition
        assert again.policy == job.policy
