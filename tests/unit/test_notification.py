"""The `on_failure` notification machine: scenarios in LUCI's style (the exact actions
after every step, and nothing new when a task comes again), then every (state, event)
pair of a table."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from statemachine.notification import (
    NO_NOTIFICATION,
    GiveUpNotification,
    NotificationDue,
    NotificationFailed,
    NotificationRequested,
    NotificationSent,
    NotificationState,
    ScheduleNotification,
    SendNotification,
    state_from_dict,
    state_to_dict,
    step,
)
from statemachine.policy import NOTIFY_RETRY, compute_backoff
from statemachine.target_kinds import TARGET_KIND_SPECS
from statemachine.vocabulary import NotificationStatus, TargetKind
from tests.unit.machine_helpers import clock

INV = "inv-1"
S = NotificationStatus


def retry_at(now: datetime, failed_attempt: int) -> datetime:
    return now + compute_backoff(NOTIFY_RETRY, failed_attempt, f"notify/{INV}")


class Notification:
    """One invocation's notification, fed events; every step round-trips the state
    through its stored form."""

    def __init__(self, state: NotificationState = NO_NOTIFICATION):
        self.state = state

    def step(self, event, at: str) -> list:
        state, actions = step(self.state, event, clock(at))
        self.state = state_from_dict(state_to_dict(state))
        assert self.state == state
        return actions

    def due(self, attempt: int, at: str) -> list:
        return self.step(NotificationDue(attempt), at)

    def failed(self, attempt: int, at: str, reason: str = "http 502", final: bool = False) -> list:
        return self.step(NotificationFailed(INV, attempt, reason, final), at)


# --- scenarios ----------------------------------------------------------------------------

def test_a_request_enqueues_attempt_1_now_and_only_once():
    notice = Notification()
    assert notice.step(NotificationRequested(), "10:15") == [ScheduleNotification(1, clock("10:15"))]
    assert notice.state == NotificationState(S.PENDING, 1)
    assert notice.step(NotificationRequested(), "10:16") == []
    assert notice.state == NotificationState(S.PENDING, 1)


def test_an_attempt_that_gets_through_ends_it_and_its_task_again_sends_nothing():
    notice = Notification()
    notice.step(NotificationRequested(), "10:15")
    assert notice.due(1, "10:15") == [SendNotification(1)]
    assert notice.state == NotificationState(S.SENDING, 1)
    assert notice.step(NotificationSent(1), "10:15:01") == []
    assert notice.state == NotificationState(S.SENT, 1)
    assert notice.due(1, "10:15:02") == []
    assert notice.step(NotificationSent(1), "10:15:03") == []
    assert notice.failed(1, "10:15:04") == []
    assert notice.state == NotificationState(S.SENT, 1)


def test_a_failed_attempt_schedules_the_next_with_the_retry_policys_backoff():
    notice = Notification()
    notice.step(NotificationRequested(), "10:15")
    notice.due(1, "10:15")
    assert notice.failed(1, "10:15:01") == [ScheduleNotification(2, retry_at(clock("10:15:01"), 1))]
    assert timedelta(seconds=1) <= retry_at(clock("10:15:01"), 1) - clock("10:15:01") <= timedelta(seconds=1.5)
    assert notice.state == NotificationState(S.PENDING, 2, "http 502")
    # The same report again, and the first attempt's task again: both are settled.
    assert notice.failed(1, "10:15:01") == []
    assert notice.due(1, "10:15:02") == []
    assert notice.due(2, "10:15:02") == [SendNotification(2)]
    assert notice.step(NotificationSent(2), "10:15:03") == []
    assert notice.state == NotificationState(S.SENT, 2, "http 502")


def test_the_last_attempt_failing_gives_up_and_later_tasks_send_nothing():
    notice = Notification()
    notice.step(NotificationRequested(), "10:15")
    for attempt in range(1, NOTIFY_RETRY.max_attempts):
        assert notice.due(attempt, "10:16") == [SendNotification(attempt)]
        [scheduled] = notice.failed(attempt, "10:16")
        assert scheduled == ScheduleNotification(attempt + 1, retry_at(clock("10:16"), attempt))
    last = NOTIFY_RETRY.max_attempts
    assert notice.due(last, "10:17") == [SendNotification(last)]
    assert notice.failed(last, "10:17", "http 500") == [GiveUpNotification(last, "http 500")]
    assert notice.state == NotificationState(S.GAVE_UP, last, "http 500")
    assert notice.due(last, "10:18") == []
    assert notice.failed(last, "10:18") == []


def test_a_final_failure_gives_up_at_once():
    notice = Notification()
    notice.step(NotificationRequested(), "10:15")
    notice.due(1, "10:15")
    assert notice.failed(1, "10:15", "no target", final=True) == [GiveUpNotification(1, "no target")]
    assert notice.state == NotificationState(S.GAVE_UP, 1, "no target")


def test_a_task_that_comes_again_while_its_attempt_is_sending_sends_it_again():
    # The process that sent it died before it could say how it went: at least once.
    notice = Notification()
    notice.step(NotificationRequested(), "10:15")
    assert notice.due(1, "10:15") == [SendNotification(1)]
    assert notice.due(1, "10:16") == [SendNotification(1)]
    assert notice.state == NotificationState(S.SENDING, 1)


def test_a_success_reported_after_a_retry_was_scheduled_still_ends_it():
    notice = Notification()
    notice.step(NotificationRequested(), "10:15")
    notice.due(1, "10:15")
    notice.due(1, "10:15")  # two deliveries of the same task race
    notice.failed(1, "10:15:01")
    assert notice.step(NotificationSent(1), "10:15:01") == []
    assert notice.state.status is S.SENT
    assert notice.due(2, "10:15:02") == []


def test_a_task_for_an_invocation_written_before_the_state_existed_is_sent():
    notice = Notification()  # its row has no notification state: its task is the request
    assert notice.due(1, "10:15") == [SendNotification(1)]


# --- the table ----------------------------------------------------------------------------

NOW = clock("10:15")
STATES = {
    "none": NO_NOTIFICATION,
    "pending 1": NotificationState(S.PENDING, 1),
    "sending 1": NotificationState(S.SENDING, 1),
    "pending 2": NotificationState(S.PENDING, 2, "http 502"),
    "sending 2": NotificationState(S.SENDING, 2, "http 502"),
    "sent 2": NotificationState(S.SENT, 2, "http 502"),
    "gave up 5": NotificationState(S.GAVE_UP, 5, "http 502"),
}
EVENTS = {
    "requested": NotificationRequested(),
    "due 1": NotificationDue(1),
    "due 2": NotificationDue(2),
    "sent 1": NotificationSent(1),
    "sent 2": NotificationSent(2),
    "failed 1": NotificationFailed(INV, 1, "http 502"),
    "failed 2": NotificationFailed(INV, 2, "http 502"),
}
SAME = "unchanged, no action"
SCHEDULE_1 = (NotificationState(S.PENDING, 1), [ScheduleNotification(1, NOW)])
SEND_1 = (NotificationState(S.SENDING, 1), [SendNotification(1)])
RETRY_2 = (NotificationState(S.PENDING, 2, "http 502"), [ScheduleNotification(2, retry_at(NOW, 1))])
RETRY_3 = (NotificationState(S.PENDING, 3, "http 502"), [ScheduleNotification(3, retry_at(NOW, 2))])


def send_2(reason: str = "") -> tuple:
    return NotificationState(S.SENDING, 2, reason), [SendNotification(2)]


def sent(attempt: int, reason: str = "") -> tuple:
    return NotificationState(S.SENT, attempt, reason), []


EXPECTED = {
    "none": {"requested": SCHEDULE_1, "due 1": SEND_1, "due 2": send_2(), "sent 1": sent(1),
             "sent 2": sent(2), "failed 1": RETRY_2, "failed 2": RETRY_3},
    "pending 1": {"requested": SAME, "due 1": SEND_1, "due 2": send_2(), "sent 1": sent(1),
                  "sent 2": sent(2), "failed 1": RETRY_2, "failed 2": RETRY_3},
    "sending 1": {"requested": SAME, "due 1": (STATES["sending 1"], [SendNotification(1)]), "due 2": send_2(),
                  "sent 1": sent(1), "sent 2": sent(2), "failed 1": RETRY_2, "failed 2": RETRY_3},
    "pending 2": {"requested": SAME, "due 1": SAME, "due 2": send_2("http 502"), "sent 1": sent(1, "http 502"),
                  "sent 2": sent(2, "http 502"), "failed 1": SAME, "failed 2": RETRY_3},
    "sending 2": {"requested": SAME, "due 1": SAME, "due 2": send_2("http 502"), "sent 1": sent(1, "http 502"),
                  "sent 2": sent(2, "http 502"), "failed 1": SAME, "failed 2": RETRY_3},
    "sent 2": dict.fromkeys(EVENTS, SAME),
    "gave up 5": {**dict.fromkeys(EVENTS, SAME), "sent 1": sent(1, "http 502"), "sent 2": sent(2, "http 502")},
}
PAIRS = [(state, event) for state in STATES for event in EVENTS]


def test_the_table_defines_every_pair():
    assert set(EXPECTED) == set(STATES)
    assert all(set(row) == set(EVENTS) for row in EXPECTED.values())


@pytest.mark.parametrize("state, event", PAIRS, ids=[f"{s} + {e}" for s, e in PAIRS])
def test_each_pair_has_its_defined_outcome(state, event):
    before = STATES[state]
    expected = EXPECTED[state][event]
    after, actions = step(before, EVENTS[event], NOW)
    if expected == SAME:
        assert (after, actions) == (before, [])
    else:
        assert (after, actions) == expected


# --- what is stored ---------------------------------------------------------------------

@pytest.mark.parametrize("state", list(STATES.values()), ids=list(STATES))
def test_every_state_round_trips_through_its_stored_form(state):
    assert state_from_dict(state_to_dict(state)) == state


def test_no_notification_is_stored_as_an_empty_object_and_the_words_are_fixed():
    assert state_to_dict(NO_NOTIFICATION) == {}
    assert state_to_dict(NotificationState(S.GAVE_UP, 5, "http 500")) == {
        "status": "gave_up", "attempt": 5, "reason": "http 500"}
    assert [s.value for s in NotificationStatus] == ["none", "pending", "sending", "sent", "gave_up"]


def test_a_stored_form_of_the_wrong_shape_is_refused():
    with pytest.raises(ValueError):
        state_from_dict({"status": "sent", "attempt": "2"})
    with pytest.raises(ValueError):
        state_from_dict({"status": "lost"})


def test_the_payload_field_of_each_target_kind():
    assert {kind.value: TARGET_KIND_SPECS[kind].payload_field for kind in TargetKind} == {
        "http": "body", "pubsub": "data", "cloud_tasks": "body", "noop": ""}
