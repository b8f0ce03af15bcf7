"""Job-level errors: the entry is skipped with its errors, exact line and text."""

import pytest

from tests.config.helpers import errors, project

NOOP = "target: {noop: {}}"
FIELDS = ("id, schedule, at, timezone, disabled, overlap, max_concurrent, catchup, timeout, "
          "retry, fanout, throttle, triggers, target, pause_after_failures, on_failure, on_recovery, "
          "exclude, description, labels, jitter, start, end, after, after_window")

CASES = [
    # --- the entry and its id ----------------------------------------------------------
    ("entry is not a map", """
        jobs:
          - just-a-name
        """, ["p.yaml:2: jobs[0]: expected a job entry (a map with id, schedule, target), "
              "got string 'just-a-name'"]),
    ("no id", f"""
        jobs:
          - schedule: triggered
            {NOOP}
        """, ["p.yaml:2: jobs[0]: needs an id"]),
    ("bad id", f"""
        jobs:
          - id: "bad id!"
            schedule: triggered
            {NOOP}
        """, ["p.yaml:2: jobs[0]: id: 'bad id!' is not a valid job id: use 1 to 100 letters, "
              "digits, '_', '.' or '-', not only dots"]),
    ("id of only dots", f"""
        jobs:
          - id: ".."
            schedule: triggered
            {NOOP}
        """, ["p.yaml:2: jobs[0]: id: '..' is not a valid job id: use 1 to 100 letters, "
              "digits, '_', '.' or '-', not only dots"]),
    ("id too long", f"""
        jobs:
          - id: {"x" * 101}
            schedule: triggered
            {NOOP}
        """, [f"p.yaml:2: jobs[0]: id: '{'x' * 101}' is not a valid job id: use 1 to 100 "
              "letters, digits, '_', '.' or '-', not only dots"]),
    ("id is a number", f"""
        jobs:
          - id: 42
            schedule: triggered
            {NOOP}
        """, ["p.yaml:2: jobs[0]: id: 42 is not a valid job id: use 1 to 100 letters, "
              "digits, '_', '.' or '-', not only dots"]),
    ("duplicate id", f"""
        jobs:
          - id: a
            schedule: triggered
            {NOOP}
          - id: a
            schedule: "@daily"
            {NOOP}
        """, ["p.yaml:5: job 'a': id is also used at line 2; ids must be unique in a project, "
              "so no entry with this id is loaded"]),
    ("unknown field, close to a known one", f"""
        jobs:
          - id: a
            schedul: triggered
            schedule: triggered
            {NOOP}
        """, ["p.yaml:3: job 'a': unknown field 'schedul' (did you mean 'schedule'?)"]),
    ("unknown field", f"""
        jobs:
          - id: a
            schedule: triggered
            owner: bob
            {NOOP}
        """, [f"p.yaml:4: job 'a': unknown field 'owner'; expected one of: {FIELDS}"]),
    # --- schedule and at ---------------------------------------------------------------
    ("schedule and at", f"""
        jobs:
          - id: a
            schedule: "@daily"
            at: ["2027-01-04T09:00:00Z"]
            {NOOP}
        """, ["p.yaml:4: job 'a': has both schedule and at; give exactly one"]),
    ("neither schedule nor at", f"""
        jobs:
          - id: a
            {NOOP}
        """, ["p.yaml:2: job 'a': needs a schedule or at (write schedule: triggered for a job "
              "that runs only when triggered)"]),
    ("bad cron expression", f"""
        jobs:
          - id: a
            schedule: "0 0 32 * *"
            {NOOP}
        """, None),  # the message is the schedule parser's; checked below
    ("unrecognised schedule", f"""
        jobs:
          - id: a
            schedule: sometimes
            {NOOP}
        """, ["p.yaml:3: job 'a': schedule: unrecognised schedule 'sometimes': expected a cron "
              "expression (5, 6 or 7 fields), a macro such as '@daily', 'every 10m', "
              "'every 1h offset 15m', 'with 10m interval', 'continuously' or 'triggered'"]),
    ("bad every duration", f"""
        jobs:
          - id: a
            schedule: every 10q
            {NOOP}
        """, ["p.yaml:3: job 'a': schedule: bad duration '10q': use <number><unit> with units "
              "ms s m h d, e.g. '1h30m' in 'every 10q'"]),
    ("empty schedule", f"""
        jobs:
          - id: a
            schedule: "  "
            {NOOP}
        """, ["p.yaml:3: job 'a': schedule: must not be empty"]),
    ("schedule is a number", f"""
        jobs:
          - id: a
            schedule: 5
            {NOOP}
        """, ["p.yaml:3: job 'a': schedule: expected a string, got integer 5; quote it"]),
    ("unquoted at time without offset", f"""
        jobs:
          - id: a
            at:
              - 2027-01-04T09:00:00Z
              - 2027-01-04T09:00:00
            {NOOP}
        """, ["p.yaml:5: job 'a': at[1]: timestamp '2027-01-04T09:00:00' has no offset; add "
              "'Z' or an offset such as '+02:00'"]),
    ("quoted at time without offset", f"""
        jobs:
          - id: a
            at: ["2027-01-04 09:00"]
            {NOOP}
        """, ["p.yaml:3: job 'a': at[0]: timestamp '2027-01-04 09:00' has no offset; add 'Z' "
              "or an offset such as '+02:00'"]),
    ("at date without a time", f"""
        jobs:
          - id: a
            at: [2027-01-04]
            {NOOP}
        """, ["p.yaml:3: job 'a': at[0]: 2027-01-04 is a date; write a time with an offset, "
              "e.g. 2027-01-04T09:00:00Z"]),
    ("at is not a list", f"""
        jobs:
          - id: a
            at: "2027-01-04T09:00:00Z"
            {NOOP}
        """, ["p.yaml:3: job 'a': at: expected a list, got string '2027-01-04T09:00:00Z'"]),
    ("at is empty", f"""
        jobs:
          - id: a
            at: []
            {NOOP}
        """, ["p.yaml:3: job 'a': at: needs at least one timestamp, e.g. "
              "[\"2027-01-04T09:00:00Z\"]"]),
    ("at item is not a timestamp", f"""
        jobs:
          - id: a
            at: ["tomorrow", 5]
            {NOOP}
        """, ["p.yaml:3: job 'a': at[0]: bad ISO-8601 timestamp 'tomorrow'",
              "p.yaml:3: job 'a': at[1]: expected a timestamp such as 2027-01-04T09:00:00Z, "
              "got 5"]),
    # --- policies ----------------------------------------------------------------------
    ("bad time zone", f"""
        jobs:
          - id: a
            schedule: "@daily"
            timezone: PST
            {NOOP}
        """, ["p.yaml:4: job 'a': timezone: unknown time zone 'PST'; use an IANA name such "
              "as 'America/Los_Angeles' or 'UTC'"]),
    ("host-dependent time zone", f"""
        jobs:
          - id: a
            schedule: "@daily"
            timezone: localtime
            {NOOP}
        """, ["p.yaml:4: job 'a': timezone: unknown time zone 'localtime'; use an IANA name "
              "such as 'America/Los_Angeles' or 'UTC'"]),
    ("disabled is not a boolean", f"""
        jobs:
          - id: a
            schedule: triggered
            disabled: "no"
            {NOOP}
        """, ["p.yaml:4: job 'a': disabled: expected true or false, got string 'no'"]),
    ("bad overlap", f"""
        jobs:
          - id: a
            schedule: triggered
            overlap: queue
            {NOOP}
        """, ["p.yaml:4: job 'a': overlap: 'queue' is not one of skip, buffer_one, "
              "buffer_all, allow, replace"]),
    ("max_concurrent without allow", f"""
        jobs:
          - id: a
            schedule: triggered
            max_concurrent: 3
            {NOOP}
        """, ["p.yaml:4: job 'a': max_concurrent: only meaningful with overlap: allow (this "
              "job's overlap is skip)"]),
    ("max_concurrent zero", f"""
        jobs:
          - id: a
            schedule: triggered
            overlap: allow
            max_concurrent: 0
            {NOOP}
        """, ["p.yaml:5: job 'a': max_concurrent: must be 1 or more, got 0"]),
    ("max_concurrent is a boolean", f"""
        jobs:
          - id: a
            schedule: triggered
            overlap: allow
            max_concurrent: true
            {NOOP}
        """, ["p.yaml:5: job 'a': max_concurrent: expected a whole number, got boolean true"]),
    ("bad catchup policy", f"""
        jobs:
          - id: a
            schedule: triggered
            catchup: {{policy: most}}
            {NOOP}
        """, ["p.yaml:4: job 'a': catchup.policy: 'most' is not one of none, latest, all"]),
    ("bad catchup window", f"""
        jobs:
          - id: a
            schedule: triggered
            catchup:
              window: 1 hour
            {NOOP}
        """, ["p.yaml:5: job 'a': catchup.window: bad duration '1 hour': use <number><unit> "
              "with units ms s m h d, e.g. '1h30m'"]),
    ("catchup as a word", f"""
        jobs:
          - id: a
            schedule: triggered
            catchup: none
            {NOOP}
        """, ["p.yaml:4: job 'a': catchup: expected a map, e.g. {policy: latest, window: 1h}, "
              "got string 'none'"]),
    ("catchup unknown field", f"""
        jobs:
          - id: a
            schedule: triggered
            catchup: {{policy: all, limit: 5}}
            {NOOP}
        """, ["p.yaml:4: job 'a': unknown field 'catchup.limit'; expected one of: policy, "
              "window"]),
    ("bad timeout", f"""
        jobs:
          - id: a
            schedule: triggered
            timeout: ten minutes
            {NOOP}
        """, ["p.yaml:4: job 'a': timeout: bad duration 'ten minutes': use <number><unit> "
              "with units ms s m h d, e.g. '1h30m'"]),
    ("zero timeout", f"""
        jobs:
          - id: a
            schedule: triggered
            timeout: 0s
            {NOOP}
        """, ["p.yaml:4: job 'a': timeout: must be more than 0s, got 0s"]),
    ("timeout as a number", f"""
        jobs:
          - id: a
            schedule: triggered
            timeout: 600
            {NOOP}
        """, ["p.yaml:4: job 'a': timeout: expected a duration such as '90s' or '1h30m', "
              "got integer 600"]),
    ("no attempts", f"""
        jobs:
          - id: a
            schedule: triggered
            retry: {{max_attempts: 0}}
            {NOOP}
        """, ["p.yaml:4: job 'a': retry.max_attempts: must be between 1 and 100, got 0"]),
    ("min_backoff above max_backoff", f"""
        jobs:
          - id: a
            schedule: triggered
            retry: {{min_backoff: 10m, max_backoff: 1m}}
            {NOOP}
        """, ["p.yaml:4: job 'a': retry: min_backoff 10m is more than max_backoff 1m"]),
    ("retry unknown field", f"""
        jobs:
          - id: a
            schedule: triggered
            retry:
              attempts: 3
            {NOOP}
        """, ["p.yaml:5: job 'a': unknown field 'retry.attempts' (did you mean "
              "'max_attempts'?)"]),
    ("fanout count zero", f"""
        jobs:
          - id: a
            schedule: triggered
            fanout: {{count: 0}}
            {NOOP}
        """, ["p.yaml:4: job 'a': fanout.count: must be between 1 and 10000, got 0"]),
    ("fanout count too big", f"""
        jobs:
          - id: a
            schedule: triggered
            fanout: {{count: 10001}}
            {NOOP}
        """, ["p.yaml:4: job 'a': fanout.count: must be between 1 and 10000, got 10001"]),
    ("fanout bad spread", f"""
        jobs:
          - id: a
            schedule: triggered
            fanout: {{count: 2, spread: -1m}}
            {NOOP}
        """, ["p.yaml:4: job 'a': fanout.spread: bad duration '-1m': use <number><unit> with "
              "units ms s m h d, e.g. '1h30m'"]),
    # --- references --------------------------------------------------------------------
    ("unknown throttle", f"""
        throttles:
          db: {{max_in_flight: 2}}
        jobs:
          - id: a
            schedule: triggered
            throttle: dbb
            {NOOP}
        """, ["p.yaml:6: job 'a': throttle: unknown throttle 'dbb' (the project's throttles: "
              "db)"]),
    ("throttle in a project without throttles", f"""
        jobs:
          - id: a
            schedule: triggered
            throttle: db
            {NOOP}
        """, ["p.yaml:4: job 'a': throttle: unknown throttle 'db' (the project's throttles: "
              "none)"]),
    ("triggers an unknown job", f"""
        jobs:
          - id: a
            schedule: triggered
            triggers:
              - a2
              - b
            {NOOP}
          - id: a2
            schedule: triggered
            {NOOP}
        """, ["p.yaml:6: job 'a': triggers[1]: unknown job 'b' in this project"]),
    ("triggers is not a list", f"""
        jobs:
          - id: a
            schedule: triggered
            triggers: a
            {NOOP}
          - id: a2
            schedule: triggered
            {NOOP}
        """, ["p.yaml:4: job 'a': triggers: expected a list, got string 'a'"]),
    ("trigger cycle", f"""
        jobs:
          - id: a
            schedule: triggered
            triggers: [b]
            {NOOP}
          - id: b
            schedule: triggered
            triggers: [c]
            {NOOP}
          - id: c
            schedule: triggered
            triggers:
              - a
            {NOOP}
        """, ["p.yaml:13: job 'c': trigger cycle: a -> b -> c -> a"]),
    ("a job that triggers itself", f"""
        jobs:
          - id: a
            schedule: triggered
            triggers: [a]
            {NOOP}
        """, ["p.yaml:4: job 'a': trigger cycle: a -> a"]),
]


def _cases():
    return [case for case in CASES if case[2] is not None]


@pytest.mark.parametrize("source, expected", [case[1:] for case in _cases()],
                         ids=[case[0] for case in _cases()])
def test_job_level_error(source, expected):
    assert errors(source) == expected


@pytest.mark.parametrize("source", [case[1] for case in CASES], ids=[case[0] for case in CASES])
def test_job_level_error_skips_only_that_job(source):
    # The same entries followed by a good job: the project loads, the good job with it.
    good = "  - id: good-one\n    schedule: triggered\n    target: {noop: {}}\n"
    config = project(source.rstrip() + "\n" + " " * 8 + good.replace("\n  ", "\n" + " " * 10))
    assert config.job_errors
    assert "good-one" in [job.id for job in config.jobs]


def test_schedule_parser_message_is_passed_on():
    from statemachine.schedule import ScheduleError, parse_schedule
    with pytest.raises(ScheduleError) as raised:
        parse_schedule("0 0 32 * *")
    source = dict((case[0], case[1]) for case in CASES)["bad cron expression"]
    assert errors(source) == [f"p.yaml:3: job 'a': schedule: {raised.value}"]


def test_every_error_of_one_entry_is_reported():
    source = """
        jobs:
          - id: a
            schedule: "@daily"
            overlap: never
            timeout: soon
            target: {http: {url: ftp://x.example.com}}
        """
    assert errors(source) == [
        "p.yaml:4: job 'a': overlap: 'never' is not one of skip, buffer_one, buffer_all, "
        "allow, replace",
        "p.yaml:5: job 'a': timeout: bad duration 'soon': use <number><unit> with units "
        "ms s m h d, e.g. '1h30m'",
        "p.yaml:6: job 'a': target.http.url: 'ftp://x.example.com' is not an http:// or "
        "https:// URL",
    ]


def test_a_cycle_skips_only_the_job_that_closes_it():
    config = project("""
        jobs:
          - id: a
            schedule: triggered
            triggers: [b]
            target: {noop: {}}
          - id: b
            schedule: triggered
            triggers: [a]
            target: {noop: {}}
        """)
    assert [job.id for job in config.jobs] == ["a"]
    assert config.broken_job_ids == {"b"}


def test_duplicates_skip_every_entry_with_that_id():
    config = project("""
        jobs:
          - id: a
            schedule: triggered
            target: {noop: {}}
          - id: a
            schedule: "@daily"
            target: {noop: {}}
          - id: b
            schedule: triggered
            triggers: [a]
            target: {noop: {}}
        """)
    assert [job.id for job in config.jobs] == ["b"]
    assert config.broken_job_ids == {"a"}


def test_triggers_may_name_a_job_whose_entry_is_broken():
    config = project("""
        jobs:
          - id: a
            schedule: triggered
            triggers: [b]
            target: {noop: {}}
          - id: b
            schedule: sometimes
            target: {noop: {}}
        """)
    assert [job.id for job in config.jobs] == ["a"]
    assert [error.job for error in config.job_errors] == ["b"]
