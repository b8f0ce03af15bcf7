"""One error family, one table: every error Sundial raises on purpose is a SundialError,
and web/errors.classify gives each its answer for the API, the UI and the task handlers."""

import pytest

from engine.errors import ConflictError, NotFound, Refused, StoreError
from statemachine.errors import SundialError
from statemachine.machine import InvalidTransition
from web.errors import STATUS, ApiError, classify


@pytest.mark.parametrize("error, code", [
    (Refused("ALREADY_EXISTS", "defined in the config file"), "ALREADY_EXISTS"),
    (ApiError("INVALID_ARGUMENT", "bad", ["line 3: bad"]), "INVALID_ARGUMENT"),
    (InvalidTransition("job proj/j is paused"), "FAILED_PRECONDITION"),
    (NotFound("job proj/j not found"), "NOT_FOUND"),
    (StoreError("disk I/O error"), "UNAVAILABLE"),
    (ConflictError("lost a race five times"), "UNAVAILABLE"),
])
def test_each_error_of_the_family_has_one_answer(error, code):
    assert isinstance(error, SundialError)
    assert classify(error)[0] == code and code in STATUS


def test_the_details_of_a_refusal_go_with_its_answer():
    refusal = ApiError("INVALID_ARGUMENT", "2 errors", ["a", "b"])
    assert classify(refusal) == ("INVALID_ARGUMENT", "2 errors", ["a", "b"])


def test_a_storage_failure_says_to_try_again():
    assert classify(StoreError("locked"))[1] == "storage is failing: locked; try again in a moment"


def test_a_member_of_the_family_the_table_does_not_know_is_an_internal_error():
    class Surprise(SundialError):
        pass

    assert classify(Surprise("?"))[0] == "INTERNAL"
