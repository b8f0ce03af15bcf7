"""SUNDIAL_HISTORY_DAYS reaches the clean-up cron of a server built by the composition root."""

from __future__ import annotations

from datetime import timedelta

from app.bootstrap import build_local
from config.settings import from_environment
from tests.contract import samples
from tests.engine.harness import FakeClock


def test_the_cleanup_cron_keeps_history_days_of_history(tmp_path):
    (tmp_path / "configs").mkdir()
    settings = from_environment({"SUNDIAL_HISTORY_DAYS": "7", "SUNDIAL_DB": str(tmp_path / "db"),
                                 "SUNDIAL_CONFIG_DIR": str(tmp_path / "configs"),
                                 "SUNDIAL_TASK_SECRET": "secret"})
    assert settings.history == timedelta(days=7)
    clock = FakeClock(samples.T0 + timedelta(days=10))
    runtime = build_local(settings, clock)
    store = runtime.engine.queries.store
    old, young = samples.invocation(samples.T0), samples.invocation(samples.T0 + timedelta(days=4))
    store.run_in_transaction(lambda tx: [tx.put_job(samples.job()), tx.put_invocation(old), tx.put_invocation(young)])
    client = runtime.app.test_client()
    answer = client.get("/internal/cron/cleanup", headers={"X-Sundial-Task-Secret": "secret"})
    assert answer.get_json() == {"cleanup": 1}
    assert store.get_invocation("proj", "job", old.id) is None
    assert store.get_invocation("proj", "job", young.id) == young
    assert store.get_job("proj", "job") == samples.job()


def test_less_than_a_day_of_history_is_refused_at_start_naming_the_variable():
    """A finish may live in its invocation's row alone until the job's next step
    (engine/deferred_finish.py): a clean-up keeping less than a day could take it."""
    import pytest

    with pytest.raises(SystemExit, match="SUNDIAL_HISTORY_DAYS: at least 1"):
        from_environment({"SUNDIAL_HISTORY_DAYS": "0"})


def test_the_watchdogs_minute_run_also_takes_a_bite_of_the_clean_up(tmp_path):
    """cron.yaml runs the clean-up once a day and the watchdog every minute: the
    watchdog's run removes old history too, so 14.4 M rows a day leave as they come."""
    (tmp_path / "configs").mkdir()
    settings = from_environment({"SUNDIAL_HISTORY_DAYS": "7", "SUNDIAL_DB": str(tmp_path / "db"),
                                 "SUNDIAL_CONFIG_DIR": str(tmp_path / "configs"),
                                 "SUNDIAL_TASK_SECRET": "secret"})
    runtime = build_local(settings, FakeClock(samples.T0 + timedelta(days=10)))
    store = runtime.engine.queries.store
    old, young = samples.invocation(samples.T0), samples.invocation(samples.T0 + timedelta(days=4))
    store.run_in_transaction(lambda tx: [tx.put_invocation(old), tx.put_invocation(young)])
    answer = runtime.app.test_client().get("/internal/cron/watchdog", headers={"X-Sundial-Task-Secret": "secret"})
    assert answer.status_code == 200 and "watchdog" in answer.get_json()
    assert store.get_invocation("proj", "job", old.id) is None
    assert store.get_invocation("proj", "job", young.id) == young
