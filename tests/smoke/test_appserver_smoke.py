"""The deployment's smoke run (tests/smoke/appserver_smoke.py) as a test.

About 50 s (40 of them dev_appserver making its virtualenv and installing
requirements.txt), so it runs only with SUNDIAL_APPSERVER_SMOKE=1, or as
`make appserver-smoke`. Skipped, with the reason, where the Cloud SDK's
dev_appserver.py or an emulator is missing.
"""

from __future__ import annotations

import os

import pytest

from tests.smoke.appserver_smoke import run_smoke, unavailable


@pytest.mark.skipif(os.environ.get("SUNDIAL_APPSERVER_SMOKE") != "1",
                    reason="slow (about 50 s): set SUNDIAL_APPSERVER_SMOKE=1, or run `make appserver-smoke`")
@pytest.mark.parametrize("store", ["datastore", "firestore"])
def test_the_app_runs_under_dev_appserver_with_app_yaml(store):
    reason = unavailable()
    if reason:
        pytest.skip(reason)
    figures = run_smoke(store)
    assert figures["occurrences_delivered"] >= 3
