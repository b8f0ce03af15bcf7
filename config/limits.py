"""The size limits of jobs and API requests, and the limits that protect the service
from one project's jobs, in one place: the validator, the API, the OpenAPI document and
the README all quote these numbers.

Why these numbers: a job row holds its definition and its record (with every `at`
time) and is read and written on every step of the job, and on Cloud Datastore an
entity may not exceed 1 MiB. The largest job the limits allow (a 256 KiB body, 32 KiB
of headers, 1,000 `at` times twice over) stays well under that, and a step stays cheap.
"""

from __future__ import annotations

from datetime import timedelta

KIB = 1024

MAX_REQUEST_BYTES = 512 * KIB  # any API request body (PUT, POST /validate, ...)
MAX_AT_TIMES = 1_000  # `at` timestamps of one job
MAX_URL_BYTES = 8 * KIB  # a target's url template
MAX_BODY_BYTES = 256 * KIB  # a body (http, cloud_tasks) or data (pubsub) template
MAX_HEADERS = 64  # headers of one target
MAX_HEADER_VALUE_BYTES = 8 * KIB  # one header value template
MAX_HEADERS_BYTES = 32 * KIB  # all header names and values of one target together
# A cloud_tasks target's url, headers and body together: Cloud Tasks refuses a task over
# 100 KB (CreateTask reference), and Sundial adds its own headers and the task's name.
MAX_CLOUD_TASK_TEMPLATE_BYTES = 90 * KIB
MAX_ATTRIBUTES = 100  # Pub/Sub attributes of one target (Pub/Sub's own limit)
MAX_ATTRIBUTE_KEY_BYTES = 256  # Pub/Sub's own limit
MAX_ATTRIBUTE_VALUE_BYTES = 1 * KIB  # Pub/Sub's own limit, for the template
MAX_JOBS_PER_PROJECT = 10_000  # jobs of a project (config and API); checked when the API creates one
MAX_PAGE_SIZE = 1_000  # invocations per page of history
# Jobs of one batch put (jobs:batchPut): a thousand small `at` jobs fit the request size, and
# their parsing and commits stay within a second or so of the server's time.
MAX_BATCH_JOBS = 1_000
MAX_REASON_CHARS = 1_000  # a pause or abort reason
MAX_REQUEST_ID_CHARS = 128  # a trigger's idempotency key
MAX_MESSAGE_CHARS = 4_000  # an async completion's message
# Exclusion calendars: each job copies the calendars it names into its definition and its
# stored policy, so these bound the job's row (5 full calendars stay under 150 KB of it).
MAX_CALENDAR_ENTRIES = 500  # dates, and ranges, of one calendar
MAX_EXCLUDE_CALENDARS = 5  # calendars one job's `exclude` names

LIMITS = {
    "request_body_bytes": MAX_REQUEST_BYTES,
    "at_times_per_job": MAX_AT_TIMES,
    "url_bytes": MAX_URL_BYTES,
    "body_bytes": MAX_BODY_BYTES,
    "headers_per_target": MAX_HEADERS,
    "header_value_bytes": MAX_HEADER_VALUE_BYTES,
    "headers_total_bytes": MAX_HEADERS_BYTES,
    "cloud_task_template_bytes": MAX_CLOUD_TASK_TEMPLATE_BYTES,
    "attributes_per_target": MAX_ATTRIBUTES,
    "attribute_key_bytes": MAX_ATTRIBUTE_KEY_BYTES,
    "attribute_value_bytes": MAX_ATTRIBUTE_VALUE_BYTES,
    "jobs_per_project": MAX_JOBS_PER_PROJECT,
    "page_size": MAX_PAGE_SIZE,
    "batch_put_jobs": MAX_BATCH_JOBS,
    "reason_chars": MAX_REASON_CHARS,
    "request_id_chars": MAX_REQUEST_ID_CHARS,
    "completion_message_chars": MAX_MESSAGE_CHARS,
    "calendar_entries": MAX_CALENDAR_ENTRIES,
    "calendars_per_job": MAX_EXCLUDE_CALENDARS,
}


# Rates and deadlines (docs/REFERENCE.md section 6). `every` fires at most once per second
# (statemachine.schedule.MIN_PERIOD). A failed attempt waits at least MIN_BACKOFF,
# and `continuously` waits like a retry after a failed invocation.
MIN_BACKOFF = timedelta(milliseconds=100)
MAX_ATTEMPTS = 100
# An invocation's `timeout` on each backend: the deadline of a whole (async) run.
MAX_JOB_TIMEOUT = {"local": timedelta(days=7), "cloud": timedelta(days=7)}
# One attempt's `timeout` (http): on the cloud backend the attempt runs inside a task
# handler, which App Engine stops after 10 minutes (automatic scaling); a minute is
# left for the handler's own writes. Longer work answers 202 with `async: true`.
MAX_ATTEMPT_TIMEOUT = {"local": timedelta(hours=1), "cloud": timedelta(minutes=9)}


def size_error(what: str, size: int, limit: int) -> str:
    """`the template is 300,000 bytes; the limit is 262,144 bytes`."""
    return f"{what} is {size:,} bytes; the limit is {limit:,} bytes"


def count_error(what: str, count: int, limit: int) -> str:
    """`1,001 timestamps; at most 1,000 are allowed`."""
    return f"{count:,} {what}; at most {limit:,} are allowed"
