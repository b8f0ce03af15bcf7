"""Virtualenvs for the install tests, made without the package index.

The wheel is built once from a clean copy of the repository (the files git tracks, so a
module or template that was never committed fails here as it would for a user). A test's
virtualenv borrows libraries from the interpreter running the tests through a .pth file:
either all of them, or only the distributions the package's core dependencies pull in
(links to their files in a directory of their own), which is an environment without the
`gcp` extra's Google libraries. Either way nothing is downloaded, and the package is the
only thing installed into the venv's own site-packages.
"""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import subprocess
import sys
import sysconfig
import tomllib
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
SHARED_SITE = Path(sysconfig.get_paths()["purelib"])
# What a venv needs beside the package's dependencies to run `python -m pip`.
TOOLS = ("pip",)

# A project file the installed command validates and serves (its one job never comes due).
PROJECT_FILE = """\
jobs:
  - id: nightly
    schedule: "0 3 * * *"
    target:
      http: {url: "http://127.0.0.1:9/never"}
"""


def run(*command: str | Path, cwd: Path, timeout: float = 120,
        env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    base = {key: value for key, value in os.environ.items()
            if key not in ("PYTHONPATH", "VIRTUAL_ENV") and not key.startswith("SUNDIAL_")}
    return subprocess.run([str(part) for part in command], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env={**base, **(env or {})})


def clean_copy(destination: Path) -> Path:
    """The files git tracks, as they are in the working tree (a clone's view of it)."""
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True)
    for name in listed.stdout.decode().split("\0"):
        source = ROOT / name
        if name and source.is_file():  # a tracked file deleted in the working tree is gone
            (destination / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, destination / name)
    return destination


def build_wheel(source: Path, into: Path) -> Path:
    """The package's wheel, built with the setuptools the tests run with (requirements-dev.txt)."""
    done = run(sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-index",
               "--no-build-isolation", "--wheel-dir", into, ".", cwd=source)
    assert done.returncode == 0, done.stdout + done.stderr
    (wheel,) = into.glob("*.whl")
    return wheel


def site_packages(venv: Path) -> Path:
    return venv / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"


def new_venv(venv: Path, borrowed: Path = SHARED_SITE) -> Path:
    """A virtualenv without pip of its own that sees the libraries in `borrowed`, behind its
    own site-packages (so what is installed into it comes first); its bin/ directory."""
    done = run(sys.executable, "-m", "venv", "--without-pip", venv, cwd=venv.parent)
    assert done.returncode == 0, done.stderr
    # addsitedir also reads that directory's own .pth files.
    (site_packages(venv) / "borrowed_libraries.pth").write_text(
        f"import site; site.addsitedir({str(borrowed)!r})\n")
    return venv / "bin"


def _requirements_of(distribution: importlib.metadata.Distribution, extras: set[str]) -> list[Requirement]:
    wanted = []
    for text in distribution.requires or ():
        requirement = Requirement(text)
        marker = requirement.marker
        if marker is None or any(marker.evaluate({**default_environment(), "extra": extra})
                                 for extra in extras | {""}):
            wanted.append(requirement)
    return wanted


def core_closure() -> list[importlib.metadata.Distribution]:
    """The installed distributions the package's core dependencies (no extras) pull in,
    with pip: what a `pip install sundial-scheduler` environment holds."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    pending = [Requirement(text) for text in [*project["dependencies"], *TOOLS]]
    found: dict[str, importlib.metadata.Distribution] = {}
    while pending:
        requirement = pending.pop()
        name = canonicalize_name(requirement.name)
        if name in found:
            continue
        found[name] = importlib.metadata.distribution(name)
        pending += _requirements_of(found[name], set(requirement.extras))
    return list(found.values())


def core_libraries(directory: Path) -> Path:
    """A directory of links to the files of `core_closure()`'s distributions, to borrow."""
    directory.mkdir()
    for distribution in core_closure():
        tops = {file.parts[0] for file in distribution.files or () if ".." not in file.parts}
        for top in tops:
            if (SHARED_SITE / top).exists() and not (directory / top).exists():
                (directory / top).symlink_to(SHARED_SITE / top)
    return directory
