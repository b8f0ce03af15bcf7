"""pyproject.toml against requirements.txt and the product's imports: the package declares
every library the product imports, and the exact set the tests run on (requirements.txt)
lies within the ranges it declares, so `pip install .` can resolve to what was tested;
constraints.txt is requirements.txt as pip's -c takes it; the Google Cloud libraries are
the `gcp` extra's, not the core's."""

from __future__ import annotations

import ast
import importlib.metadata
import re
import sys
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("app", "cli", "config", "engine", "statemachine", "web")
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def _declared(extras: tuple[str, ...] = ("gcp",)) -> dict[str, Requirement]:
    texts = PROJECT["dependencies"] + [text for extra in extras for text in PROJECT["optional-dependencies"][extra]]
    requirements = (Requirement(text) for text in texts)
    return {canonicalize_name(requirement.name): requirement for requirement in requirements}


def _pins() -> dict[str, str]:
    pins = {}
    for line in (ROOT / "requirements.txt").read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            requirement = Requirement(line)
            (specifier,) = requirement.specifier
            pins[canonicalize_name(requirement.name)] = specifier.version
    return pins


def _imported_modules() -> set[str]:
    """Absolute imports of the product's modules, by full dotted name."""
    names = set()
    for package in PRODUCT:
        for path in sorted((ROOT / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.Import):
                    names |= {alias.name for alias in node.names}
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names |= {f"{node.module}.{alias.name}" for alias in node.names} | {node.module}
    return {name for name in names if name.split(".")[0] not in set(sys.stdlib_module_names) | set(PRODUCT)}


def _distribution_of_modules() -> dict[str, str]:
    """Every installed module's dotted name -> the distribution that installed it, from the
    distributions' file lists (nothing is imported)."""
    owners = {}
    for distribution in importlib.metadata.distributions():
        for file in distribution.files or ():
            parts = file.parts
            if parts[-1].endswith((".py", ".so")) and ".." not in parts:
                module = parts[:-1] if parts[-1] == "__init__.py" else (*parts[:-1], parts[-1].split(".")[0])
                owners[".".join(module)] = distribution.metadata["Name"]
    return owners


def test_every_pin_of_requirements_lies_in_the_declared_range():
    pins = _pins()
    for name, requirement in _declared().items():
        assert name in pins, f"{name} is declared in pyproject.toml but not pinned in requirements.txt"
        assert requirement.specifier.contains(pins[name], prereleases=True), (
            f"requirements.txt pins {name}=={pins[name]}, outside pyproject.toml's {requirement.specifier}")


def test_every_library_the_product_imports_is_declared():
    declared, owners, missing = set(_declared()), _distribution_of_modules(), set()
    for name in sorted(_imported_modules()):
        # The longest installed prefix: `from google.cloud import ndb` names google.cloud.ndb,
        # `from yaml.nodes import Node` names yaml.nodes.Node, held by yaml.nodes.
        parts = name.split(".")
        held = next((owners[".".join(parts[:n])] for n in range(len(parts), 0, -1) if ".".join(parts[:n]) in owners),
                    None)
        if held is None and any(module.startswith(name + ".") for module in owners):
            continue  # a namespace package (google.cloud): what is imported from it is listed too
        assert held, f"no installed distribution holds {name}"
        if canonicalize_name(held) not in declared:
            missing.add(f"{held} (for {name})")
    assert not missing, f"pyproject.toml does not declare: {sorted(missing)}"


def test_the_core_needs_no_google_library():
    """The SQLite backend installs without grpc, protobuf and the Google clients; they come
    with the `gcp` extra (tests/e2e/test_package_install.py runs the package without them)."""
    core = [name for name in _declared(extras=()) if name.startswith(("google", "grpc", "proto"))]
    assert not core, f"core dependencies that belong in the gcp extra: {core}"
    gcp = set(_declared(extras=("gcp",))) - set(_declared(extras=()))
    assert {"google-cloud-ndb", "google-cloud-tasks", "google-cloud-pubsub", "google-auth", "grpcio"} <= gcp


def test_constraints_are_the_pins_without_extras():
    """pip's -c refuses a line with extras ("Constraints cannot have extras"); the Makefile's
    `constraints.txt` rule writes this, and it must follow every change of requirements.txt."""
    header = ("# Generated from requirements.txt by `make constraints.txt`: the same pins without extras,\n"
              "# as pip's -c takes them. Edit requirements.txt, then run that.\n")
    pins = re.sub(r"^([A-Za-z0-9_.-]+)\[[^]]*\]", r"\1", (ROOT / "requirements.txt").read_text(), flags=re.M)
    assert (ROOT / "constraints.txt").read_text() == header + pins, "run `make constraints.txt`"
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        if line.split("#")[0].strip():
            assert not Requirement(line).extras, line
