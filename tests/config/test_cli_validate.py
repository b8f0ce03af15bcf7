"""`python main.py validate PATH...` as a user runs it: a subprocess from the repo root."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from config.loader import validate_paths

ROOT = Path(__file__).resolve().parents[2]

GOOD = "jobs:\n  - id: a\n    schedule: triggered\n    target: {noop: {}}\n"
BAD_JOB = ("jobs:\n  - id: a\n    schedule: sometimes\n    target: {noop: {}}\n"
           "  - id: b\n    schedule: triggered\n    target: {noop: {}}\n")
BAD_FILE = "jobs: [\n"
LOCAL = "jobs:\n  - id: a\n    schedule: triggered\n    target: {http: {url: 'http://10.0.0.1/'}}\n"


def run(*args, env=None):
    # The caller's own SUNDIAL_BACKEND must not change what these tests see.
    environment = {key: value for key, value in os.environ.items() if key != "SUNDIAL_BACKEND"}
    environment.update(env or {})
    return subprocess.run([sys.executable, "main.py", "validate", *map(str, args)], cwd=ROOT,
                          capture_output=True, text=True, timeout=60, env=environment)


def test_valid_files_exit_0_and_print_nothing_on_stdout(tmp_path):
    (tmp_path / "one.yaml").write_text(GOOD)
    (tmp_path / "two.yaml").write_text("")
    result = run(tmp_path / "one.yaml", tmp_path / "two.yaml")
    assert (result.returncode, result.stdout) == (0, "")
    assert result.stderr == "validate: 2 files valid\n"


def test_errors_exit_1_with_one_line_each_on_stdout(tmp_path):
    (tmp_path / "jobs.yaml").write_text(BAD_JOB)
    (tmp_path / "broken.yaml").write_text(BAD_FILE)
    (tmp_path / "fine.yaml").write_text(GOOD)
    (tmp_path / "notes.txt").write_text("not a config")
    result = run(tmp_path)
    assert result.returncode == 1
    assert result.stdout.splitlines() == [
        f"{tmp_path / 'broken.yaml'}:2: bad YAML: expected the node content, but found "
        "'<stream end>' (while parsing a flow node)",
        f"{tmp_path / 'jobs.yaml'}:3: job 'a': schedule: unrecognised schedule 'sometimes': "
        "expected a cron expression (5, 6 or 7 fields), a macro such as '@daily', "
        "'every 10m', 'every 1h offset 15m', 'with 10m interval', 'continuously' or "
        "'triggered'",
    ]
    assert result.stderr == "validate: 2 errors (3 files checked)\n"


def test_a_missing_path_is_an_error_in_its_place(tmp_path):
    (tmp_path / "fine.yaml").write_text(GOOD)
    result = run(tmp_path / "missing.yaml", tmp_path / "fine.yaml")
    assert result.returncode == 1
    assert result.stdout == f"{tmp_path / 'missing.yaml'}:1: no such file or directory\n"


def test_a_file_the_server_would_not_import(tmp_path):
    (tmp_path / "Team_A.yml").write_text(GOOD)
    result = run(tmp_path / "Team_A.yml")
    assert result.returncode == 1
    assert result.stdout.splitlines() == [
        f"{tmp_path / 'Team_A.yml'}:1: the server imports only <project>.yaml files; rename it",
        f"{tmp_path / 'Team_A.yml'}:1: project id 'Team_A' (the file name without .yaml) must "
        "be 1 to 63 lower-case letters, digits or '-', starting with a letter or digit",
    ]


def test_backend_flag_and_environment(tmp_path):
    (tmp_path / "p.yaml").write_text(LOCAL)
    assert run(tmp_path).returncode == 0
    assert run(tmp_path, "--backend", "cloud").returncode == 1
    assert run(tmp_path, env={"SUNDIAL_BACKEND": "cloud"}).returncode == 1
    bad = run(tmp_path, env={"SUNDIAL_BACKEND": "gae"})
    assert bad.returncode == 2 and "SUNDIAL_BACKEND" in bad.stderr


def test_no_path_is_a_usage_error():
    result = run()
    assert result.returncode == 2 and result.stdout == ""


@pytest.mark.parametrize("backend", ["local", "cloud"])
def test_validate_paths_in_process(tmp_path, backend):
    (tmp_path / "p.yaml").write_text(GOOD)
    assert validate_paths([str(tmp_path)], backend) == []
