"""Which emulator the cloud store's end-to-end and fault tests run on.

The `cloud_database` fixture (tests/conftest.py) is the Datastore emulator (with
--require_indexes and index.yaml) or the Firestore emulator in Datastore mode
(production's size limits and lock-based transactions), each emptied before the test.
Both run every test by default; a slow test narrows it with

    @pytest.mark.parametrize("cloud_database", ON_BOTH_IN_LONG_RUNS, indirect=True)

so that its Firestore variant runs only in a long run: SUNDIAL_FAULTS_SCALE set (the
fault trials' scale, tests/faults/support.py) or SUNDIAL_FIRESTORE_ALL=1. All of
them together take about 170 s on the Firestore emulator, more than CI can spare; the
default suite keeps, beside the contract suite, one fast end-to-end run on it (a real
server whose retries go through Cloud Tasks: tests/e2e/test_backoff_floor.py, 3 s).
"""

from __future__ import annotations

import os

import pytest

LONG_RUN = bool(os.environ.get("SUNDIAL_FAULTS_SCALE")) or os.environ.get("SUNDIAL_FIRESTORE_ALL") == "1"
FIRESTORE_IN_LONG_RUNS = pytest.param("firestore", marks=pytest.mark.skipif(
    not LONG_RUN, reason="Firestore variant of a slow test: set SUNDIAL_FIRESTORE_ALL=1 or SUNDIAL_FAULTS_SCALE"))
ON_BOTH_IN_LONG_RUNS = ["datastore", FIRESTORE_IN_LONG_RUNS]
