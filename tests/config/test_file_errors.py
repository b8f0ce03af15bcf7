"""File-level errors: the whole project fails, each error with its exact line and text."""

import time

import pytest

from config.loader import parse_project_text
from config.model import ProjectConfigError
from tests.config.helpers import NAME, errors, text

# Every test here runs on both YAML paths (conftest.py): the error texts must not depend on libyaml.
pytestmark = pytest.mark.usefixtures("yaml_path")

TOP = "allowed_hosts, acl, defaults, throttles, calendars, jobs"

CASES = [
    # --- the document ------------------------------------------------------------------
    ("top level is a list", """
        - id: a
        """, [f"p.yaml:1: the top level must be a map of project fields ({TOP}), got a list"]),
    ("top level is a string", """
        hello
        """, [f"p.yaml:1: the top level must be a map of project fields ({TOP}), "
              "got string 'hello'"]),
    ("unknown top-level field, close to a known one", """
        acl: {}
        job: []
        """, ["p.yaml:2: unknown field 'job' (did you mean 'jobs'?)"]),
    ("unknown top-level field", """
        colour: red
        """, [f"p.yaml:1: unknown field 'colour'; expected one of: {TOP}"]),
    ("jobs is not a list", """
        jobs: {a: 1}
        """, ["p.yaml:1: jobs: expected a list, got a map"]),
    # --- allowed_hosts -----------------------------------------------------------------
    ("allowed_hosts is not a list", """
        allowed_hosts: metadata.google.internal
        """, ["p.yaml:1: allowed_hosts: expected a list, got string 'metadata.google.internal'"]),
    ("allowed_hosts entry is a URL", """
        allowed_hosts:
          - ok.example.com
          - https://x.example.com/
        """, ["p.yaml:3: allowed_hosts[1]: 'https://x.example.com/' is not a host name; "
              "write the host alone, e.g. metadata.google.internal"]),
    ("allowed_hosts entry is a number", """
        allowed_hosts: [10]
        """, ["p.yaml:1: allowed_hosts[0]: expected a string, got integer 10; quote it"]),
    # --- acl ---------------------------------------------------------------------------
    ("acl member without a kind", """
        acl:
          readers: [alice@example.com]
        """, ["p.yaml:2: acl.readers[0]: 'alice@example.com' is not a member: write "
              "user:EMAIL, group:NAME, serviceAccount:EMAIL or anonymous"]),
    ("acl user that is not an email", """
        acl:
          owners: [user:alice]
        """, ["p.yaml:2: acl.owners[0]: 'user:alice' is not a member: write "
              "user:EMAIL, group:NAME, serviceAccount:EMAIL or anonymous"]),
    ("acl unknown role", """
        acl:
          writers: [user:bob@example.com]
        """, ["p.yaml:2: unknown field 'acl.writers'; expected one of: readers, triggerers, "
              "owners"]),
    ("acl role is not a list", """
        acl:
          readers: group:everyone
        """, ["p.yaml:2: acl.readers: expected a list, got string 'group:everyone'"]),
    ("acl is not a map", """
        acl: [user:a@example.com]
        """, ["p.yaml:1: acl: expected a map, e.g. {readers: [group:everyone]}, got a list"]),
    # --- throttles ---------------------------------------------------------------------
    ("throttle limit below 1", """
        throttles:
          backups: {max_in_flight: 0}
        """, ["p.yaml:2: throttles.backups.max_in_flight: must be 1 or more, got 0"]),
    ("throttle without a limit", """
        throttles:
          backups: {}
        """, ["p.yaml:2: throttles.backups: needs max_in_flight, e.g. {max_in_flight: 20}"]),
    ("throttle with an unknown field", """
        throttles:
          backups: {max_in_flight: 2, burst: 3}
        """, ["p.yaml:2: unknown field 'throttles.backups.burst'; expected one of: "
              "max_in_flight"]),
    ("throttle limit that is not a number", """
        throttles:
          backups: {max_in_flight: many}
        """, ["p.yaml:2: throttles.backups.max_in_flight: expected a whole number, "
              "got string 'many'"]),
    ("throttle with a bad name", """
        throttles:
          "my throttle": {max_in_flight: 1}
        """, ["p.yaml:2: 'my throttle' is not a valid throttle name (letters, digits, "
              "'_', '.', '-')"]),
    ("throttles is a list", """
        throttles: [a]
        """, ["p.yaml:1: throttles: expected a map, e.g. {backup-consumers: "
              "{max_in_flight: 20}}, got a list"]),
    # --- defaults ----------------------------------------------------------------------
    ("defaults with a bad time zone", """
        defaults:
          timezone: Mars/Olympus
        """, ["p.yaml:2: defaults.timezone: unknown time zone 'Mars/Olympus'; use an IANA "
              "name such as 'America/Los_Angeles' or 'UTC'"]),
    ("defaults with a per-job field", """
        defaults:
          schedule: "@daily"
        """, ["p.yaml:2: defaults.schedule: cannot have a default: id, schedule, at and "
              "target are set in each job"]),
    ("defaults with an unknown field", """
        defaults:
          overlapp: skip
        """, ["p.yaml:2: unknown field 'defaults.overlapp' (did you mean 'overlap'?)"]),
    ("defaults with a bad overlap", """
        defaults:
          overlap: queue
        """, ["p.yaml:2: defaults.overlap: 'queue' is not one of skip, buffer_one, "
              "buffer_all, allow, replace"]),
    ("defaults whose min_backoff passes the built-in max_backoff", """
        defaults:
          retry: {min_backoff: 10m}
        """, ["p.yaml:2: defaults.retry: min_backoff 10m is more than max_backoff 5m"]),
    ("defaults naming an unknown throttle", """
        defaults:
          throttle: nope
        """, ["p.yaml:2: defaults.throttle: unknown throttle 'nope'"]),
    ("defaults triggering an unknown job", """
        defaults:
          triggers: [nope]
        """, ["p.yaml:2: defaults.triggers: unknown job 'nope' in this project"]),
    ("defaults is a list", """
        defaults: [a]
        """, ["p.yaml:1: defaults: expected a map, e.g. {timezone: America/Los_Angeles}, "
              "got a list"]),
    # --- YAML itself -------------------------------------------------------------------
    ("YAML syntax error", """
        jobs:
         - id: x
          bad: [
        """, ["p.yaml:3: bad YAML: expected <block end>, but found '<block mapping start>' "
              "(while parsing a block collection)"]),
    ("unclosed flow list", """
        acl:
          readers: [group:a
        jobs: []
        """, ["p.yaml:3: bad YAML: expected ',' or ']', but got ':' "
              "(while parsing a flow sequence)"]),
    ("a python tag", """
        jobs: !!python/object/apply:os.system ["echo hacked"]
        """, ["p.yaml:1: YAML tag '!!python/object/apply:os.system' is not allowed: config "
              "files hold plain strings, numbers, booleans, lists and maps"]),
    ("a python tag on a scalar deep inside", """
        jobs:
          - id: a
            schedule: !!python/name:os.system
        """, ["p.yaml:3: YAML tag '!!python/name:os.system' is not allowed: config files "
              "hold plain strings, numbers, booleans, lists and maps"]),
    ("a local tag", """
        jobs: !custom []
        """, ["p.yaml:1: YAML tag '!custom' is not allowed: config files hold plain "
              "strings, numbers, booleans, lists and maps"]),
    ("a field given twice", """
        jobs:
          - id: a
            schedule: triggered
            schedule: "@daily"
        """, ["p.yaml:4: field 'jobs[0].schedule' is given twice"]),
    ("an unquoted schedule starting with *", """
        jobs:
          - id: a
            schedule: * * * * *
        """, ["p.yaml:3: bad YAML: expected alphabetic or numeric character, but found ' ' "
              "(while scanning an alias); quote values that start with '*' or '@', "
              "e.g. schedule: \"@daily\""]),
    ("an unquoted macro", """
        jobs:
          - id: a
            schedule: @daily
        """, ["p.yaml:3: bad YAML: found character '@' that cannot start any token "
              "(while scanning for the next token); quote values that start with '*' or "
              "'@', e.g. schedule: \"@daily\""]),
    ("two documents", """
        jobs: []
        ---
        jobs: []
        """, ["p.yaml:2: bad YAML: expected a single document in the stream, but found "
              "another document"]),
    ("a map as a key", """
        ? {a: 1}
        : x
        """, ["p.yaml:1: bad YAML: a map key must be a plain name, not a list or map"]),
    ("a recursive alias", """
        a: &a [*a]
        """, ["p.yaml:1: bad YAML: nested more than 64 levels deep"]),
]


@pytest.mark.parametrize("source, expected", [case[1:] for case in CASES],
                         ids=[case[0] for case in CASES])
def test_file_level_error(source, expected):
    assert errors(source) == expected


@pytest.mark.parametrize("source", [case[1] for case in CASES], ids=[case[0] for case in CASES])
def test_file_level_error_fails_the_whole_project(source):
    with pytest.raises(ProjectConfigError):
        parse_project_text("p", text(source), NAME)


def test_file_level_errors_come_with_the_job_errors_by_line():
    source = """
        jobs:
          - id: a
            schedule: triggered
            target: {noop: {}}
            colour: red
        owners: [x]
        """
    assert errors(source) == [
        "p.yaml:5: job 'a': unknown field 'colour'; expected one of: id, schedule, at, "
        "timezone, disabled, overlap, max_concurrent, catchup, timeout, retry, fanout, "
        "throttle, triggers, target, pause_after_failures, on_failure, on_recovery, exclude, description, labels, "
        "jitter, start, end, after, after_window",
        "p.yaml:6: unknown field 'owners'; expected one of: " + TOP,
    ]


def test_billion_laughs_is_refused_quickly():
    rows = ["a: &a [x, x, x, x, x, x, x, x, x, x]"]
    for level in "bcdefgh":
        previous = chr(ord(level) - 1)
        rows.append(f"{level}: &{level} [" + ", ".join([f"*{previous}"] * 10) + "]")
    assert errors("\n".join(rows)) == [f"p.yaml:1: {EXPANSION_ERROR}"]


EXPANSION_ERROR = ("bad YAML: aliases expand the document to more than 10,000 values (20 per "
                   "value written, at least 10,000, at most 500,000)")


def test_a_small_alias_bomb_is_refused_in_proportion_to_its_size():
    # 247 bytes that expanded to 280,000 values (about 90 MB, 0.7 s) before.
    rows = ['a0: &a0 ["llllllllll","l","l","l","l","l"]']
    rows += [f"a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * 6) + "]" for i in range(1, 7)]
    source = "\n".join(rows) + "\n"
    assert len(source) == 247
    # This thread's CPU time, not the wall clock: what the other processes of a busy
    # machine (the suite's second worker, say) take is not the parser's doing.
    started = time.thread_time()
    assert errors(source) == [f"p.yaml:1: {EXPANSION_ERROR}"]
    assert time.thread_time() - started < 0.5


def test_merge_keys_reused_by_many_jobs_stay_within_the_bound():
    base = "defaults_anchor: &base {timezone: UTC, timeout: 1m, retry: {max_attempts: 3}}\n"
    jobs = "".join(f"  - {{<<: *base, id: j{i}, schedule: triggered, target: {{noop: {{}}}}}}\n"
                   for i in range(3000))
    errors_found = errors(base.replace("defaults_anchor", "x-anchor") + "jobs:\n" + jobs)
    assert not any("aliases expand" in error for error in errors_found), errors_found[:2]


def test_deep_nesting_is_refused():
    assert errors("a: " + "[" * 5000 + "]" * 5000) == [
        "p.yaml:1: bad YAML: nested more than 64 levels deep"]


@pytest.mark.parametrize("project_id", ["Bridge", "my_project", "-x", "a" * 64, ""])
def test_bad_project_id(project_id):
    with pytest.raises(ProjectConfigError) as failure:
        parse_project_text(project_id, "jobs: []\n", "f.yaml")
    assert [str(error) for error in failure.value.errors] == [
        f"f.yaml:1: project id '{project_id}' (the file name without .yaml) must be 1 to 63 "
        "lower-case letters, digits or '-', starting with a letter or digit"]


@pytest.mark.parametrize("project_id", ["bridge", "a", "my-project-2", "a" * 63, "0day"])
def test_good_project_id(project_id):
    assert parse_project_text(project_id, "jobs: []\n", "f.yaml").project == project_id
