"""Every command's --help says what it does, the environment variables it reads, and
gives examples. The variables are found in the code that reads them, so a variable
added there without a word in --help fails here."""

from __future__ import annotations

import inspect
import re

import pytest

import cli.preview
import cli.queues
import cli.validate
import config.settings
from cli import build_parser

READ = re.compile(r'(?:env\.get|_duration|_int|variable)\((?:env, )?"([A-Z][A-Z0-9_]+)"')


def reads(*sources) -> set[str]:
    return {name for source in sources for name in READ.findall(inspect.getsource(source))}


def help_of(command: str) -> str:
    parser = build_parser()
    [subparsers] = [action for action in parser._actions if action.dest == "command"]
    return subparsers.choices[command].format_help()


VARIABLES = {
    "serve": reads(config.settings),
    "validate": reads(cli.validate, config.settings.own_service),
    "queues": reads(cli.queues),
    "next": reads(cli.preview),
    "render": reads(cli.preview),
}


def test_the_variables_are_found():
    assert {"SUNDIAL_API_TOKENS", "SUNDIAL_DB", "GOOGLE_CLOUD_PROJECT", "HOME"} <= VARIABLES["serve"]
    assert {"SUNDIAL_BACKEND", "SUNDIAL_SERVICE_URL"} <= VARIABLES["validate"]
    assert {"SUNDIAL_TASKS_LOCATION", "SUNDIAL_CONFIG_DIR"} <= VARIABLES["queues"]


@pytest.mark.parametrize("command", sorted(VARIABLES))
def test_help_names_every_variable_the_command_reads_and_gives_examples(command):
    text = help_of(command)
    assert {name for name in VARIABLES[command] if not re.search(rf"\b{name}\b", text)} == set()
    assert "Environment" in text and "Examples:" in text
    if not VARIABLES[command]:
        assert "Environment: none is read" in text


def test_serve_help_tells_the_loopback_rule_and_the_log_format():
    text = " ".join(help_of("serve").split())
    assert "SUNDIAL_API_TOKENS" in text and "listens on loopback only" in text and "--require-identity" in text
    assert "replaced by 127.0.0.1" in text
    assert "one JSON object per line" in text and "stdout" in text
