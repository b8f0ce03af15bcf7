"""The wheel as a user installs it without the `gcp` extra, then the `sundial` command.

The wheel is built once from a clean copy of the repository and installed into a new
virtualenv that sees only the libraries its core dependencies pull in (no Google Cloud
library, no grpc, no protobuf: tests/support/package_envs.py), and it runs from a directory
outside the repository, so the checkout on sys.path cannot stand in for the package. A few
seconds, no network. SUNDIAL_PACKAGE_FULL=1 installs the wheel as a user would instead,
into a bare virtualenv with its core dependencies from the package index (a minute or
more, and it needs the index). tests/e2e/test_package_coexists.py installs it beside a
distribution with generic top-level names, with the extra and the tested pins.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from datetime import datetime
from pathlib import Path
from zipfile import ZipFile

import pytest

from tests.e2e.support import free_port
from tests.support.package_envs import (
    PROJECT_FILE,
    ROOT,
    build_wheel,
    clean_copy,
    core_libraries,
    new_venv,
    run,
    site_packages,
)

FULL = os.environ.get("SUNDIAL_PACKAGE_FULL") == "1"
GOOGLE = ("google", "google.auth", "google.cloud.ndb", "grpc")


def _version() -> str:
    found = re.search(r'__version__ = "([^"]+)"', (ROOT / "cli" / "version.py").read_text())
    assert found
    return found.group(1)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    base = tmp_path_factory.mktemp("wheel")
    started = time.monotonic()
    built = build_wheel(clean_copy(base / "source"), base / "dist")
    print(f"wheel built in {time.monotonic() - started:.1f} s")
    return built


@pytest.fixture(scope="module")
def installed(wheel, tmp_path_factory) -> Path:
    """The bin/ directory of a virtualenv with the wheel and only its core dependencies."""
    base = tmp_path_factory.mktemp("package")
    if FULL:
        done = run(sys.executable, "-m", "venv", base / "venv", cwd=base)
        assert done.returncode == 0, done.stderr
        bin_dir, offline = base / "venv" / "bin", ()
    else:
        bin_dir = new_venv(base / "venv", borrowed=core_libraries(base / "core-libraries"))
        offline = ("--no-deps", "--no-index")
    done = run(bin_dir / "python", "-m", "pip", "install", "--quiet", *offline, wheel, cwd=base, timeout=900)
    assert done.returncode == 0, done.stdout + done.stderr
    return bin_dir


def test_the_wheel_adds_one_name_to_site_packages(wheel):
    """Nothing generic (cli, config, web, app, engine, statemachine) at the top of
    site-packages, where another distribution's files of the same name would be overwritten
    or overwrite these; the schema and the WSGI entry are in the package."""
    names = ZipFile(wheel).namelist()
    tops = {name.split("/")[0] for name in names}
    assert tops == {"sundial_scheduler", f"sundial_scheduler-{_version()}.dist-info"}
    for expected in ("sundial_scheduler/cli/__init__.py", "sundial_scheduler/wsgi.py",
                     "sundial_scheduler/docs/project.schema.json", "sundial_scheduler/web/static/ui.css",
                     "sundial_scheduler/engine/adapters/local/sqlite_store.py"):
        assert expected in names
    product = {path.relative_to(ROOT).as_posix() for top in ("app", "cli", "config", "engine", "statemachine", "web")
               for path in (ROOT / top).rglob("*.py")}
    assert {f"sundial_scheduler/{name}" for name in product} <= set(names), "a product module is not in the wheel"


def test_the_package_is_what_runs_not_the_checkout(installed, tmp_path):
    done = run(installed / "python", "-c", "import sundial_scheduler; print(sundial_scheduler.__file__)", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(str(site_packages(installed.parent))), done.stdout
    # The product's short names are not importable outside the sundial command's process.
    done = run(installed / "python", "-c", "import cli", cwd=tmp_path)
    assert "No module named 'cli'" in done.stderr


def test_no_google_library_is_there(installed, tmp_path):
    """The environment the tests below run in really is one without the `gcp` extra."""
    for name in GOOGLE:
        done = run(installed / "python", "-c", f"import {name}", cwd=tmp_path)
        assert done.returncode == 1 and "ModuleNotFoundError" in done.stderr, name
    done = run(installed / "python", "-m", "pip", "check", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr


def test_validate(installed, tmp_path):
    (tmp_path / "ops.yaml").write_text(PROJECT_FILE)
    done = run(installed / "sundial", "validate", "ops.yaml", cwd=tmp_path)
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "validate: 1 file valid\n")


def test_checking_google_signed_tokens_without_the_gcp_extra_says_what_to_install(installed, tmp_path):
    """On the embedded backend too: refused at start, not a failure of every call to check."""
    done = run(installed / "sundial", "serve", "--port", str(free_port()), "--db", tmp_path / "s.db", cwd=tmp_path,
               env={"SUNDIAL_IAP_AUDIENCE": "/projects/1/apps/demo"}, timeout=60)
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stderr.endswith("sundial: SUNDIAL_IAP_AUDIENCE has Google-signed tokens checked, and google-auth"
                                " is not installed: pip install 'sundial-scheduler[gcp]'\n"), done.stderr


def test_the_cloud_backend_without_the_gcp_extra_says_what_to_install(installed, tmp_path):
    done = run(installed / "sundial", "serve", "--port", str(free_port()), cwd=tmp_path,
               env={"SUNDIAL_BACKEND": "cloud", "GOOGLE_CLOUD_PROJECT": "demo"})
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stderr.count("\n") == 1, done.stderr  # one line, no traceback
    assert "pip install 'sundial-scheduler[gcp]'" in done.stderr, done.stderr


def test_queues_without_the_gcp_extra_says_what_to_install(installed, tmp_path):
    done = run(installed / "sundial", "queues", cwd=tmp_path, env={"GOOGLE_CLOUD_PROJECT": "demo"})
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stderr.count("\n") == 1, done.stderr  # one line, no traceback
    assert "`sundial queues` needs the Google Cloud libraries" in done.stderr, done.stderr
    assert "pip install 'sundial-scheduler[gcp]'" in done.stderr, done.stderr


def test_version_and_help(installed, tmp_path):
    done = run(installed / "sundial", "--version", cwd=tmp_path)
    assert (done.returncode, done.stdout) == (0, f"sundial {_version()}\n"), done.stderr
    done = run(installed / "sundial", "--help", cwd=tmp_path)
    assert done.returncode == 0
    assert done.stdout.startswith("usage: sundial ")
    done = run(installed / "sundial", "bogus", cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.startswith("sundial: error: argument COMMAND: invalid choice: 'bogus'")


def test_next(installed, tmp_path):
    done = run(installed / "sundial", "next", "*/5 * * * *", "--after", "2026-01-01T00:01:00Z", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    first = done.stdout.splitlines()[0]
    assert datetime.fromisoformat(first.replace("Z", "+00:00")) == datetime.fromisoformat("2026-01-01T00:05:00+00:00")


def _get(url: str) -> tuple[int, bytes]:
    with urllib.request.urlopen(url, timeout=10) as response:
        return response.status, response.read()


def _wait_for_health(server: subprocess.Popen, url: str, log: Path) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        assert server.poll() is None, f"serve exited: {log.read_text()[-2000:]}"
        try:
            if _get(url + "/healthz")[0] == 200:
                return
        except OSError:
            time.sleep(0.1)
    raise AssertionError(f"no /healthz within 30 s: {log.read_text()[-2000:]}")


def test_serve(installed, tmp_path):
    configs = tmp_path / "configs"
    configs.mkdir()
    (configs / "ops.yaml").write_text(PROJECT_FILE)
    url, log = f"http://127.0.0.1:{free_port()}", tmp_path / "serve.log"
    # With a dispatcher child: it starts in the package's directory and must find the code there.
    command = [installed / "sundial", "serve", "--port", url.rsplit(":", 1)[1], "--processes", "2",
               "--db", tmp_path / "state" / "sundial.db", "--configs", configs]
    env = {key: value for key, value in os.environ.items()
           if not key.startswith("SUNDIAL_") and key not in ("PYTHONPATH", "VIRTUAL_ENV")}
    with open(log, "wb") as output:
        server = subprocess.Popen([str(part) for part in command], cwd=tmp_path, env=env,
                                  stdout=output, stderr=subprocess.STDOUT)
    try:
        _wait_for_health(server, url, log)
        # The web UI's templates and stylesheet are package data: a page and the CSS render.
        assert _get(url + "/ui/static/ui.css")[0] == 200
        deadline = time.monotonic() + 20
        while b"nightly" not in _get(url + "/p/ops")[1]:  # the config import runs in the background
            assert time.monotonic() < deadline, log.read_text()[-2000:]
            time.sleep(0.2)
        while "dispatcher process started" not in log.read_text():  # logged by the child itself
            assert time.monotonic() < deadline + 20, log.read_text()[-2000:]
            time.sleep(0.2)
    finally:
        server.send_signal(signal.SIGTERM)
        code = server.wait(timeout=30)
    assert code == 0, log.read_text()[-2000:]


def test_an_editable_install_runs_the_checkout(tmp_path):
    """`pip install -e .`: the package's entry finds the product's packages beside it, in
    the checkout (the wheel's layout is not there)."""
    source = clean_copy(tmp_path / "source")
    bin_dir = new_venv(tmp_path / "venv")
    done = run(bin_dir / "python", "-m", "pip", "install", "--quiet", "--no-deps", "--no-index",
               "--no-build-isolation", "--editable", ".", cwd=source)
    assert done.returncode == 0, done.stdout + done.stderr
    done = run(bin_dir / "sundial", "--version", cwd=tmp_path)
    assert (done.returncode, done.stdout) == (0, f"sundial {_version()}\n"), done.stderr
    done = run(bin_dir / "python", "-c", "import sundial_scheduler.wsgi, cli; print(cli.__file__)", cwd=tmp_path)
    assert done.stdout == f"{source / 'cli' / '__init__.py'}\n", done.stderr
