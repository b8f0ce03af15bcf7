"""docs/ALERTS.md's Prometheus rules, run by Prometheus' own promtool.

The doc's rule block is tests/alerts/rules.yml (held the same here, so the tests run
what readers copy); `promtool check rules` must accept it, and `promtool test rules`
runs the unit tests beside it (*_test.yml), which cover every alert of the file. The
two promtool tests skip when promtool is not on PATH: `make test` installs it where it
can (the Makefile's promtool target).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

HERE = Path(__file__).parent
RULES = HERE / "rules.yml"
ALERTS = HERE.parent.parent / "docs" / "ALERTS.md"
UNIT_TESTS = sorted(HERE.glob("*_test.yml"))


def _doc_rules() -> str:
    blocks = [block for block in re.findall(r"```yaml\n(.*?)```", ALERTS.read_text(), re.S)
              if block.startswith("groups:")]
    assert len(blocks) == 1, "docs/ALERTS.md should have one rule block (starting `groups:`)"
    return blocks[0]


def _file_rules() -> str:
    """rules.yml without its leading comment, which says where it comes from."""
    lines = RULES.read_text().splitlines(keepends=True)
    return "".join(lines[next(i for i, line in enumerate(lines) if not line.startswith("#")):])


def _promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        pytest.skip("promtool is not on PATH, so docs/ALERTS.md's rules were not run: `make test` "
                    "installs it from Debian's prometheus package when it can")
    return found


def test_the_rule_file_is_the_docs_rule_block():
    assert _file_rules() == _doc_rules()


def test_every_alert_of_the_rules_has_a_unit_test():
    rules = yaml.safe_load(_file_rules())
    alerts = {rule["alert"] for group in rules["groups"] for rule in group["rules"]}
    tested = {case["alertname"] for path in UNIT_TESTS for group in yaml.safe_load(path.read_text())["tests"]
              for case in group.get("alert_rule_test", ())}
    assert alerts - tested == set()
    assert tested - alerts == set()  # a test of a rule the doc no longer has


def test_promtool_accepts_the_rules():
    answer = subprocess.run([_promtool(), "check", "rules", RULES.name], cwd=HERE,
                            capture_output=True, text=True, timeout=60)
    assert answer.returncode == 0, answer.stdout + answer.stderr


def test_the_rules_pass_their_promtool_unit_tests():
    answer = subprocess.run([_promtool(), "test", "rules", *(path.name for path in UNIT_TESTS)], cwd=HERE,
                            capture_output=True, text=True, timeout=120)
    assert answer.returncode == 0, answer.stdout + answer.stderr
    assert answer.stdout.count("SUCCESS") == len(UNIT_TESTS), answer.stdout
