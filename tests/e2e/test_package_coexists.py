"""The package beside a distribution with generic top-level names, installed with the
README's pinned command.

`acme-tools` (made here) installs top-level `app`, `cli`, `config`, `engine` and `web`
packages, the names Sundial's own code uses. Installed before and after Sundial, and
each uninstalled in turn, neither breaks the other: Sundial's code lives inside
`sundial_scheduler/`. Sundial goes in with `pip install -c constraints.txt '.[gcp]'`, the
README's command for the tested pins, plus the flags that keep it off the package index
(the venv borrows the test interpreter's libraries, which satisfy every pin). Its WSGI
entry serves under gunicorn in the same venv. About 20 s.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from tests.e2e.support import free_port
from tests.support.package_envs import PROJECT_FILE, ROOT, clean_copy, new_venv, run, site_packages

GENERIC = ("app", "cli", "config", "engine", "web")
OTHER = """\
[build-system]
requires = ["setuptools>=77"]
build-backend = "setuptools.build_meta"
[project]
name = "acme-tools"
version = "1.0"
[tool.setuptools]
packages = [{names}]
"""
# Each of acme's packages answers with its own name: proof that it is acme's that was imported.
ACME_WORKS = "; ".join(f"import {name}; assert {name}.ACME == {name!r}" for name in GENERIC)


def _other_distribution(directory: Path) -> Path:
    for name in GENERIC:
        (directory / name).mkdir(parents=True)
        (directory / name / "__init__.py").write_text(f"ACME = {name!r}\n")
    (directory / "pyproject.toml").write_text(OTHER.format(names=", ".join(f'"{name}"' for name in GENERIC)))
    return directory


def _pip(bin_dir: Path, *arguments: str | Path, cwd: Path) -> None:
    done = run(bin_dir / "python", "-m", "pip", *arguments, cwd=cwd, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.fixture(scope="module")
def place(tmp_path_factory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("coexist")
    return {"base": base, "source": clean_copy(base / "source"), "other": _other_distribution(base / "acme"),
            "bin": new_venv(base / "venv")}


PINNED = "pip install -c constraints.txt '.[gcp]'"  # as the README shows it


def test_the_readme_shows_the_pinned_command_run_here():
    assert PINNED in (ROOT / "README.md").read_text()


def _install_sundial_pinned(place: dict[str, Path]) -> None:
    _pip(place["bin"], "install", "--quiet", "--no-index", "--no-build-isolation",
         "-c", "constraints.txt", ".[gcp]", cwd=place["source"])


def _install_other(place: dict[str, Path]) -> None:
    _pip(place["bin"], "install", "--quiet", "--no-index", "--no-build-isolation", place["other"], cwd=place["base"])


def _sundial_works(bin_dir: Path, cwd: Path) -> None:
    (cwd / "ops.yaml").write_text(PROJECT_FILE)
    done = run(bin_dir / "sundial", "validate", "ops.yaml", cwd=cwd)
    assert (done.returncode, done.stderr) == (0, "validate: 1 file valid\n"), done.stdout + done.stderr
    done = run(bin_dir / "python", "-m", "sundial_scheduler", "--version", cwd=cwd)
    assert done.returncode == 0 and done.stdout.startswith("sundial "), done.stderr


def _other_works(bin_dir: Path, cwd: Path) -> None:
    done = run(bin_dir / "python", "-c", ACME_WORKS, cwd=cwd)
    assert done.returncode == 0, done.stderr


def test_installed_after_the_other_then_each_uninstalled_in_turn(place, tmp_path):
    bin_dir = place["bin"]
    _install_other(place)
    _install_sundial_pinned(place)
    _other_works(bin_dir, tmp_path)  # installing Sundial overwrote none of acme's files
    _sundial_works(bin_dir, tmp_path)
    done = run(bin_dir / "python", "-m", "pip", "check", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    _pip(bin_dir, "uninstall", "--quiet", "--yes", "sundial-scheduler", cwd=tmp_path)
    _other_works(bin_dir, tmp_path)  # uninstalling Sundial took none of acme's files
    _install_sundial_pinned(place)
    _pip(bin_dir, "uninstall", "--quiet", "--yes", "acme-tools", cwd=tmp_path)
    _sundial_works(bin_dir, tmp_path)  # nor the other way round
    assert not any((site_packages(bin_dir.parent) / name).exists() for name in GENERIC)


def test_the_wsgi_entry_serves_beside_the_other(place, tmp_path):
    """`gunicorn sundial_scheduler.wsgi:app` with acme's `app`, `config` and `web` installed."""
    bin_dir = place["bin"]
    if not (site_packages(bin_dir.parent) / "sundial_scheduler").exists():
        _install_sundial_pinned(place)
    _install_other(place)
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "ops.yaml").write_text(PROJECT_FILE)
    port, log = free_port(), tmp_path / "gunicorn.log"
    env = {"SUNDIAL_DB": str(tmp_path / "state" / "sundial.db"), "SUNDIAL_CONFIG_DIR": str(tmp_path / "configs")}
    command = [bin_dir / "python", "-m", "gunicorn", "--bind", f"127.0.0.1:{port}", "sundial_scheduler.wsgi:app"]
    with open(log, "wb") as output:
        server = subprocess.Popen([str(part) for part in command], cwd=tmp_path, stdout=output,
                                  stderr=subprocess.STDOUT, env=_environment(env))
    try:
        deadline = time.monotonic() + 30
        while not _answers(f"http://127.0.0.1:{port}/p/ops", b"nightly"):
            assert server.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.2)
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=30)


def _environment(extra: dict[str, str]) -> dict[str, str]:
    base = {key: value for key, value in os.environ.items()
            if key not in ("PYTHONPATH", "VIRTUAL_ENV") and not key.startswith("SUNDIAL_")}
    return {**base, **extra}


def _answers(url: str, expected: bytes) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return expected in response.read()
    except OSError:
        return False
