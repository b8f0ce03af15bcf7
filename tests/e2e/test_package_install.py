"""`pip install .` from a clean copy of the repository, then the `sundial` command it installs.

The copy holds only the files git tracks, so a module or template that was never committed
fails here as it would for a user. It is installed into a new virtualenv and run from a
directory outside the repository, so the checkout on sys.path cannot stand in for the package.

By default the virtualenv borrows the libraries of the interpreter running the tests (a .pth
file), and the package is built with the setuptools installed there (requirements-dev.txt):
a few seconds, no network. SUNDIAL_PACKAGE_FULL=1 installs it as a user would, into a bare
virtualenv with its dependencies and its build backend from the package index (a minute or
more, and it needs the index).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import sysconfig
import time
import urllib.request
from datetime import datetime
from pathlib import Path

import pytest

from tests.e2e.support import free_port

ROOT = Path(__file__).resolve().parents[2]
FULL = os.environ.get("SUNDIAL_PACKAGE_FULL") == "1"

CONFIG = """\
jobs:
  - id: nightly
    schedule: "0 3 * * *"
    target:
      http: {url: "http://127.0.0.1:9/never"}
"""


def _version() -> str:
    found = re.search(r'__version__ = "([^"]+)"', (ROOT / "cli" / "version.py").read_text())
    assert found
    return found.group(1)


def _clean_copy(destination: Path) -> Path:
    """The files git tracks, as they are in the working tree (a clone's view of it)."""
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True)
    for name in listed.stdout.decode().split("\0"):
        source = ROOT / name
        if name and source.is_file():  # a tracked file deleted in the working tree is gone
            (destination / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, destination / name)
    return destination


def _run(*command: str | Path, cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return subprocess.run([str(part) for part in command], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env=env)


def _venv_site_packages(venv: Path) -> Path:
    return venv / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"


def _install_borrowing_libraries(source: Path, venv: Path) -> None:
    import setuptools

    major = int(setuptools.__version__.split(".")[0])
    assert major >= 77, (f"setuptools {setuptools.__version__} cannot build pyproject.toml (77 or later);"
                         " `make` installs the one requirements-dev.txt pins")
    done = _run(sys.executable, "-m", "venv", "--without-pip", venv, cwd=source)
    assert done.returncode == 0, done.stderr
    # Behind the venv's own site-packages, so the installed package comes first; addsitedir
    # also reads that directory's own .pth files.
    borrowed = sysconfig.get_paths()["purelib"]
    (_venv_site_packages(venv) / "borrowed_libraries.pth").write_text(
        f"import site; site.addsitedir({borrowed!r})\n")
    done = _run(venv / "bin" / "python", "-m", "pip", "install", "--quiet", "--no-deps", "--no-index",
                "--no-build-isolation", ".", cwd=source)
    assert done.returncode == 0, done.stdout + done.stderr


def _install_from_the_index(source: Path, venv: Path) -> None:
    done = _run(sys.executable, "-m", "venv", venv, cwd=source)
    assert done.returncode == 0, done.stderr
    done = _run(venv / "bin" / "python", "-m", "pip", "install", "--quiet", ".", cwd=source, timeout=900)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """The bin/ directory of a virtualenv with the package installed from a clean copy."""
    base = tmp_path_factory.mktemp("package")
    source = _clean_copy(base / "source")
    venv = base / "venv"
    started = time.monotonic()
    (_install_from_the_index if FULL else _install_borrowing_libraries)(source, venv)
    print(f"installed ({'from the index' if FULL else 'borrowing libraries'}) in "
          f"{time.monotonic() - started:.1f} s")
    return venv / "bin"


def test_the_package_is_what_runs_not_the_checkout(installed, tmp_path):
    done = _run(installed / "python", "-c", "import cli, web; print(cli.__file__); print(web.__file__)",
                cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    site_packages = str(_venv_site_packages(installed.parent))
    assert all(line.startswith(site_packages) for line in done.stdout.splitlines()), done.stdout


def test_version_and_help(installed, tmp_path):
    done = _run(installed / "sundial", "--version", cwd=tmp_path)
    assert (done.returncode, done.stdout) == (0, f"sundial {_version()}\n"), done.stderr
    done = _run(installed / "sundial", "--help", cwd=tmp_path)
    assert done.returncode == 0
    assert done.stdout.startswith("usage: sundial ")
    done = _run(installed / "sundial", "bogus", cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.startswith("sundial: error: argument COMMAND: invalid choice: 'bogus'")


def test_next(installed, tmp_path):
    done = _run(installed / "sundial", "next", "*/5 * * * *", "--after", "2026-01-01T00:01:00Z", cwd=tmp_path)
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
    (configs / "ops.yaml").write_text(CONFIG)
    url, log = f"http://127.0.0.1:{free_port()}", tmp_path / "serve.log"
    command = [installed / "sundial", "serve", "--port", url.rsplit(":", 1)[1],
               "--db", tmp_path / "state" / "sundial.db", "--configs", configs]
    env = {key: value for key, value in os.environ.items() if not key.startswith("SUNDIAL_")}
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
    finally:
        server.send_signal(signal.SIGTERM)
        code = server.wait(timeout=30)
    assert code == 0, log.read_text()[-2000:]
