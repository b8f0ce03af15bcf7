"""A job record's and a policy's stored text, spelled directly rather than through a dict.

The text is exactly `json.dumps(record_to_dict(record), separators=(",", ":"))` (and
`policy_to_dict` for the policy's part): the same keys in the same order, strings
escaped by the encoder's own function, so stored bytes do not change. Building the
dicts and walking them in the encoder was a fifth of a first import's apply (the
record of a brand-new job and its new policy, for every job); a record with
invocations under way or waiting (its lists) goes the general way, which the caller
keeps (`record_text` returns None for it).

tests/local/test_record_text.py holds both spellings equal over records and policies
with every field set, so a field added to the dicts without its place here fails there.
"""

from __future__ import annotations

import json
from datetime import datetime
from json.encoder import encode_basestring_ascii as _string  # the encoder's own (C) function
from typing import Iterable

from statemachine.calendars import calendars_to_list
from statemachine.policy import JobPolicy
from statemachine.record import JobRecord
from statemachine.record_form import written_version
from statemachine.stored_form import millis, stored_time

__all__ = ["policy_text", "record_text"]


def record_text(record: JobRecord, policy: str) -> str | None:
    """The record's text with `policy` (the policy's text, or "null") in its place;
    None for a record whose lists hold anything, or that keeps a later release's fields
    (encode it the general way)."""
    if record.active or record.buffered or record.runs or record.dropping or record.awaiting or record.later:
        return None
    return (  # with no active entry, no event is in rows: the lowest version holds it
        f'{{"version":{written_version(record):d},"project":{_string(record.project)},'
        f'"job_id":{_string(record.job_id)},"state":{_string(record.state.value)},"policy":{policy},'
        f'"disabled":{_BOOL[record.disabled]},"paused":{_BOOL[record.paused]},'
        f'"pause_reason":{_string(record.pause_reason)},"paused_at":{_time(record.paused_at)},'
        f'"paused_by":{_string(record.paused_by)},"generation":{record.generation:d},'
        f'"nonce_counter":{record.nonce_counter:d},"tick_at":{_time(record.tick_at)},'
        f'"tick_nonce":{"null" if record.tick_nonce is None else _string(record.tick_nonce)},'
        f'"scheduled_until":{_time(record.scheduled_until)},"paused_through":{_time(record.paused_through)},'
        f'"active":[],"buffered":[],"runs":[],"dropping":[],"watchdog_at":{_time(record.watchdog_at)},'
        f'"consecutive_failures":{record.consecutive_failures:d},'
        f'"failures_since_success":{record.failures_since_success:d},'
        f'"last_finished_at":{_time(record.last_finished_at)},"last_succeeded_at":{_time(record.last_succeeded_at)}}}'
    )


def policy_text(policy: JobPolicy) -> str:
    """`policy_to_dict(policy)` as compact JSON."""
    text = (
        f'{{"schedule":{_string(policy.schedule_text)},"timezone":{_string(policy.timezone)},'
        f'"at":{_times(policy.at) if policy.at else "[]"},{_middle(policy)},'
        f'"revision":{_string(policy.revision)}'
    )
    # Written only when set, as policy_to_dict does.
    if policy.jitter:
        text += f',"jitter_ms":{millis(policy.jitter):d}'
    if policy.start is not None:
        text += f',"start":{_time(policy.start)}'
    if policy.end is not None:
        text += f',"end":{_time(policy.end)}'
    if policy.exclude:  # rare, and lists of maps: the encoder spells them
        text += ',"exclude":' + json.dumps(calendars_to_list(policy.exclude), separators=(",", ":"))
    if policy.triggers_on_failure:
        text += f',"triggers_on_failure":{_strings(policy.triggers_on_failure)}'
    if policy.after:
        text += f',"after":[{_strings(policy.after)},{millis(policy.after_window):d}]'
    if policy.reports_to:
        text += f',"reports_to":{_strings(policy.reports_to)}'
    if policy.later:  # a later release's fields, kept as read: the encoder spells them
        text += "," + json.dumps(json.loads(policy.later), separators=(",", ":"))[1:-1]
    return text + "}"


def _middle(policy: JobPolicy) -> str:
    """The fields between "at" and "revision", which the jobs of a file mostly share:
    spelled once for each combination (by value: equal fields, equal text)."""
    key = (policy.overlap, policy.max_concurrent, policy.catchup, policy.catchup_window, policy.timeout,
           policy.attempt_timeout, policy.retry, policy.fanout, policy.triggers, policy.throttle,
           policy.pause_after_failures, policy.notify_failures, policy.notify_recoveries)
    text = _MIDDLES.get(key)
    if text is None:
        if len(_MIDDLES) >= 1024:
            _MIDDLES.clear()
        text = _MIDDLES[key] = _spell_middle(policy)
    return text


_MIDDLES: dict[tuple[object, ...], str] = {}


def _spell_middle(policy: JobPolicy) -> str:
    retry, fanout = policy.retry, policy.fanout
    return (
        f'"overlap":{_string(policy.overlap.value)},'
        f'"max_concurrent":{policy.max_concurrent:d},"catchup":{_string(policy.catchup.value)},'
        f'"catchup_window_ms":{millis(policy.catchup_window):d},"timeout_ms":{millis(policy.timeout):d},'
        f'"attempt_timeout_ms":{millis(policy.attempt_timeout):d},'
        f'"retry":[{retry.max_attempts:d},{millis(retry.min_backoff):d},{millis(retry.max_backoff):d}],'
        f'"fanout":[{fanout.count:d},{millis(fanout.spread):d}],"triggers":{_strings(policy.triggers)},'
        f'"throttle":{_string(policy.throttle)},"pause_after_failures":{policy.pause_after_failures:d},'
        f'"notify_failures":{_BOOL[policy.notify_failures]},"notify_recoveries":{_BOOL[policy.notify_recoveries]}'
    )


_BOOL = {False: "false", True: "true"}


def _time(value: datetime | None) -> str:
    return "null" if value is None else f'"{stored_time(value)}"'  # digits, '-', ':', '.', 'T', 'Z'


def _times(values: Iterable[datetime]) -> str:
    return "[" + ",".join(_time(value) for value in values) + "]"


def _strings(values: Iterable[str]) -> str:
    return "[" + ",".join(_string(value) for value in values) + "]"
