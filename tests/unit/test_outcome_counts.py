"""What a job's record keeps of its invocations' outcomes: failures in a row and its
last success (what /metrics shows per job)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from statemachine.pausing import count_outcome
from statemachine.record import new_record
from statemachine.record_form import record_from_dict, record_to_dict
from statemachine.vocabulary import InvocationStatus

T0 = datetime(2026, 1, 5, 10, 0, tzinfo=timezone.utc)


def test_a_success_is_kept_and_failures_skips_and_aborts_leave_it():
    record = new_record("p", "j")
    record, _ = count_outcome(record, InvocationStatus.SUCCEEDED, "", T0)
    assert (record.last_succeeded_at, record.consecutive_failures) == (T0, 0)
    for minute, status in enumerate((InvocationStatus.FAILED, InvocationStatus.SKIPPED,
                                     InvocationStatus.ABORTED, InvocationStatus.FAILED), start=1):
        record, _ = count_outcome(record, status, "http 500", T0 + timedelta(minutes=minute))
    assert (record.last_succeeded_at, record.consecutive_failures) == (T0, 2)
    assert record_from_dict(record_to_dict(record)) == record


def test_a_record_written_before_the_field_reads_as_never_succeeded():
    data = record_to_dict(new_record("p", "j"))
    del data["last_succeeded_at"]
    assert record_from_dict(data).last_succeeded_at is None
