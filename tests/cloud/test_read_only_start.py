"""On App Engine standard the filesystem is read-only except /tmp: app.yaml's own
entrypoint (gunicorn, main:app, the cloud backend on the emulators) must start, import
the configs and answer the crons without writing anywhere else.

The server runs in a mount namespace of its own (`unshare --mount`, root only) where
`/` is remounted read-only, so a write anywhere but /tmp fails with EROFS even for
root; /tmp stays writable, as on App Engine, and its TMPDIR must be left empty.
Skipped where the namespace cannot be made (not root, no unshare).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import yaml

from tests.e2e.support import free_port, wait_until
from tests.support.emulators import cloud_server_env

ROOT = Path(__file__).resolve().parents[2]
# /tmp made a mount of its own first, so that the read-only remount of / leaves it writable.
READ_ONLY_BUT_TMP = 'mount --bind /tmp /tmp && mount -o remount,bind,ro / && exec "$@"'
CONFIG = """
jobs:
  - id: on-demand
    schedule: triggered
    target: {noop: {}}
"""


def _namespace_unavailable() -> str | None:
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        return "needs root and unshare to remount / read-only in a mount namespace"
    probe = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c",
                            READ_ONLY_BUT_TMP, "sh", "true"], capture_output=True)
    return None if probe.returncode == 0 else f"cannot remount / read-only here: {probe.stderr.decode()}"


def _entrypoint(port: int) -> list[str]:
    """app.yaml's entrypoint, with $PORT filled in and gunicorn from this virtualenv."""
    words = yaml.safe_load((ROOT / "app.yaml").read_text())["entrypoint"].replace("$PORT", str(port)).split()
    assert words[0] == "gunicorn"
    return [str(Path(sys.executable).parent / "gunicorn"), *words[1:]]


def _call(port: int, path: str, headers: dict | None = None) -> tuple[int, dict | None]:
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as error:
        return error.code, None
    except OSError:
        return 0, None


def test_app_yaml_entrypoint_starts_and_serves_crons_on_a_read_only_filesystem(tmp_path, datastore,
                                                                                tasks_emulator):
    reason = _namespace_unavailable()
    if reason:
        pytest.skip(reason)
    configs, scratch = tmp_path / "configs", tmp_path / "tmp"
    configs.mkdir()
    scratch.mkdir()
    (configs / "readonly.yaml").write_text(CONFIG)
    port = free_port()
    env = {**os.environ, **cloud_server_env(datastore, tasks_emulator, "read-only", port),
           "GAE_APPLICATION": "s~sundial-test", "PORT": str(port), "SUNDIAL_CONFIG_DIR": str(configs),
           "TMPDIR": str(scratch), "PYTHONDONTWRITEBYTECODE": "1"}
    log_path = tmp_path / "gunicorn.log"
    with open(log_path, "wb") as log:
        server = subprocess.Popen(
            ["unshare", "--mount", "--propagation", "private", "sh", "-c", READ_ONLY_BUT_TMP, "sh",
             *_entrypoint(port)],
            cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )
    try:
        assert wait_until(lambda: _call(port, "/healthz")[0] == 200 or server.poll() is not None, 60)
        assert server.poll() is None, log_path.read_text()[-3000:]
        cron = {"X-Appengine-Cron": "true"}
        assert _call(port, "/internal/cron/import-configs", cron) == (200, {"import-configs": 1})
        assert _call(port, "/internal/cron/watchdog", cron)[0] == 200
        time.sleep(0.5)  # let the workers log whatever they tried after answering
    finally:
        os.killpg(server.pid, 15)
        server.wait(20)
    log = log_path.read_text()
    for sign in ("Read-only file system", "Errno 30", "Traceback"):
        assert sign not in log, log[-3000:]
    assert list(scratch.iterdir()) == []  # nothing left in /tmp either
