"""docs/REFERENCE.md keeps up with the code: every environment variable Sundial reads,
every template variable, every project-file field, every cron macro and every API
endpoint is in it. Each list comes from the one place the code defines it, so a new
variable, field or endpoint fails here until the reference describes it."""

import ast
import re
from pathlib import Path

import pytest

import config.settings
from config.jobs import JOB_FIELDS
from config.model import BUILTIN_DEFAULTS
from config.targets import TARGET_KINDS
from config.validate import ACL_ROLES, TOP_FIELDS
from statemachine.cron import MACROS
from statemachine.target_kinds import TARGET_KIND_SPECS
from statemachine.template import HOOK_VARIABLES, KNOWN_VARIABLES
from web.openapi import openapi_document

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = (ROOT / "docs" / "REFERENCE.md").read_text(encoding="utf-8")
SETTINGS = Path(config.settings.__file__)
PRODUCT = ("app", "cli", "config", "engine", "statemachine", "web")
_ENV_NAME = re.compile(r"[A-Z][A-Z0-9]*(_[A-Z0-9]+)*")


def _read_in_settings() -> set[str]:
    """Names config/settings.py passes to a call (env.get, _duration, _int, ...)."""
    tree = ast.parse(SETTINGS.read_text(encoding="utf-8"))
    return {arg.value for node in ast.walk(tree) if isinstance(node, ast.Call) for arg in node.args
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str) and _ENV_NAME.fullmatch(arg.value)}


def _read_through_variable() -> set[str]:
    """Names product code reads alone through config.settings.variable("NAME")."""
    names = set()
    for folder in PRODUCT:
        for path in (ROOT / folder).rglob("*.py"):
            names.update(re.findall(r"\bvariable\(\"([A-Z][A-Z0-9_]*)\"", path.read_text(encoding="utf-8")))
    return names


def _settings_table() -> set[str]:
    """The variables of the table in config/settings.py's docstring (a cell may list several)."""
    names = set()
    for line in (config.settings.__doc__ or "").splitlines():
        if line.startswith("| ") and not line.startswith("| variable"):
            names.update(name.strip() for name in line.split("|")[1].split(","))
    return names


def _documented(name: str) -> bool:
    return f"`{name}`" in REFERENCE


def test_the_code_reads_the_variables_we_think_it_does():
    read = _read_in_settings()
    assert {"SUNDIAL_DB", "SUNDIAL_API_TOKENS", "GOOGLE_CLOUD_PROJECT", "HOME"} <= read
    assert "SUNDIAL_BACKEND" in _read_through_variable()


def test_every_variable_the_code_reads_is_in_the_settings_table():
    missing = sorted((_read_in_settings() | _read_through_variable()) - _settings_table())
    assert missing == [], f"add them to the table in config/settings.py's docstring: {missing}"


def test_every_variable_of_the_settings_table_is_in_the_reference():
    missing = sorted(name for name in _settings_table() if not _documented(name))
    assert missing == [], f"describe them in docs/REFERENCE.md section 8: {missing}"


def test_every_template_variable_is_in_the_reference():
    # The hook-only variables are named explicitly: KNOWN_VARIABLES holds them today,
    # and they must stay documented should that ever change.
    missing = sorted(name for name in KNOWN_VARIABLES | HOOK_VARIABLES if f"`${{{name}}}`" not in REFERENCE)
    assert missing == []


@pytest.mark.parametrize("fields", [
    TOP_FIELDS, JOB_FIELDS, ACL_ROLES, [kind.value for kind in TARGET_KINDS],
    *(spec.names for spec in TARGET_KIND_SPECS.values()),
    [f"{name}.{key}" for name in ("catchup", "retry", "fanout") for key in BUILTIN_DEFAULTS[name]],
], ids=["top", "job", "acl", "target-kinds", *TARGET_KIND_SPECS, "nested"])
def test_every_project_file_field_is_in_the_reference(fields):
    assert sorted(name for name in fields if not _documented(name)) == []


def test_every_cron_macro_is_in_the_reference():
    assert sorted(macro for macro in MACROS if not _documented(macro)) == []


def _endpoint(method: str, path: str) -> str:
    return f"{method.upper()} " + re.sub(r"\{[^}]*\}", "{}", path)


def test_every_api_endpoint_is_in_the_reference():
    described = {_endpoint(method, path) for path, item in openapi_document()["paths"].items()
                 for method in item if method in ("get", "put", "post", "delete", "patch")}
    shown = {_endpoint(method, path) for method, path in
             re.findall(r"`(GET|PUT|POST|DELETE|PATCH) (/[^`?\[ ]*)", REFERENCE)}
    assert sorted(described - shown) == []
