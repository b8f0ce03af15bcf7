"""app.yaml, cron.yaml and .gcloudignore agree with the code they deploy."""

from __future__ import annotations

import fnmatch
import json
import logging
import re
import subprocess
import sys
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import pytest
import yaml

from app.bootstrap import build_local
from config.limits import MAX_ATTEMPT_TIMEOUT
from config.settings import Settings
from engine.adapters.cloud.cloud_tasks_queue import DISPATCH_DEADLINE
from engine.deliveries import log as deliveries_log
from engine.logs import JsonFormatter
from tests.smoke.appserver_smoke import SDK
from tests.smoke.upload import load_rules, parse_rule, tracked_files, upload_set, working_tree_files

ROOT = Path(__file__).resolve().parents[2]
GCLOUD_LIB = SDK / "lib"
# App Engine standard runtimes that are supported and stay so for a while: each is
# supported until its Python's upstream end of life. python311 ends in October 2027,
# too soon for a new deployment; drop a runtime from here a year before its end.
LONG_LIVED_RUNTIMES = {"python312": "2028-10", "python313": "2029-10", "python314": "2030-10"}


def load(name: str) -> dict:
    return yaml.safe_load((ROOT / name).read_text())


def test_app_yaml_runs_gunicorn_on_the_cloud_backend():
    app = load("app.yaml")
    assert app["runtime"] in LONG_LIVED_RUNTIMES, app["runtime"]
    assert app["entrypoint"].startswith("gunicorn ") and app["entrypoint"].endswith(" main:app")
    assert "--bind :$PORT" in app["entrypoint"]
    assert app["env_variables"]["SUNDIAL_BACKEND"] == "cloud"
    assert app["env_variables"]["SUNDIAL_CONFIG_DIR"] == "configs"
    # An explicit entrypoint means App Engine does not add gunicorn by itself.
    pins = (ROOT / "requirements.txt").read_text().splitlines()
    assert any(line.startswith("gunicorn==") for line in pins)


def test_app_engine_sends_as_many_requests_at_once_as_the_workers_have_threads():
    app = load("app.yaml")
    words = app["entrypoint"].split()
    workers, threads = int(words[words.index("--workers") + 1]), int(words[words.index("--threads") + 1])
    assert app["automatic_scaling"]["max_concurrent_requests"] == workers * threads


def test_gunicorn_writes_nothing_to_the_read_only_filesystem_at_start():
    # gunicorn 27 opens a control socket under $HOME unless told not to.
    assert "--no-control-socket" in load("app.yaml")["entrypoint"].split()


def test_every_cron_entry_reaches_a_cron_handler_on_app_engine(tmp_path):
    cron = load("cron.yaml")["cron"]
    urls = [entry["url"] for entry in cron]
    assert urls == ["/internal/cron/watchdog", "/internal/cron/import-configs", "/internal/cron/cleanup"]
    assert [entry["schedule"] for entry in cron[:2]] == ["every 1 minutes"] * 2
    settings = replace(Settings(), db_path=str(tmp_path / "db.sqlite"), config_dir=str(tmp_path),
                       on_app_engine=True)
    client = build_local(settings).app.test_client()
    for url in urls:
        assert client.get(url, headers={"X-Appengine-Cron": "true"}).status_code == 200, url
        assert client.get(url).status_code == 403, url


def _minutes(schedule: str) -> int:
    words = schedule.split()
    if words[:2] == ["every", "day"]:
        return 24 * 60
    assert words[0] == "every" and words[2] in ("minutes", "mins"), schedule
    return int(words[1])


def test_each_housekeeping_run_ends_before_the_next_one_starts_and_clean_up_runs_at_least_daily():
    cron = {entry["url"]: entry["schedule"] for entry in load("cron.yaml")["cron"]}
    budget = Settings().maintenance_budget
    for url in ("/internal/cron/watchdog", "/internal/cron/cleanup"):
        # A run stops at its budget (engine/maintenance.py); App Engine's cap is 10 minutes.
        assert budget.total_seconds() < min(_minutes(cron[url]) * 60, 600), url
    assert _minutes(cron["/internal/cron/cleanup"]) <= 24 * 60


def test_gcloudignore_uploads_the_app_and_its_configs_but_no_virtualenv():
    patterns = [line.strip() for line in (ROOT / ".gcloudignore").read_text().splitlines()
                if line.strip() and not line.startswith("#")]

    def ignored(path: str) -> bool:
        parts = path.split("/")
        return any(fnmatch.fnmatch(part, pattern.rstrip("/")) for pattern in patterns for part in parts)

    for kept in ("main.py", "app.yaml", "requirements.txt", "configs/hello.yaml", "engine/service.py",
                 "web/guard.py", "statemachine/machine.py", "app/bootstrap.py", "index.yaml",
                 "gunicorn.conf.py"):  # gunicorn reads it from the working directory: its lines as JSON
        assert not ignored(kept), kept
    for left_out in (".venv/bin/python", ".venv-tasks/bin/python", "tests/cloud/test_guard.py",
                     ".sundial/sundial.db", "engine/__pycache__/service.cpython-311.pyc", "pyproject.toml",
                     "setup.py", "sundial_scheduler/wsgi.py", "sundial_scheduler.egg-info/PKG-INFO"):
        assert ignored(left_out), left_out


def test_deploy_md_creates_the_throttle_queues_of_the_configs_it_deploys():
    # Without --configs the command reads SUNDIAL_CONFIG_DIR, which app.yaml sets for the
    # app but not for the shell running the command: it fell back to the examples.
    deploy = (ROOT / "docs" / "DEPLOY.md").read_text()
    commands = [line.strip() for line in deploy.splitlines()
                if "main.py queues" in line and line.strip().startswith((".venv/bin/python", "python "))]
    config_dir = load("app.yaml")["env_variables"]["SUNDIAL_CONFIG_DIR"]
    assert commands and all(f"--configs {config_dir}" in line for line in commands), commands


def test_the_upload_passes_dev_appservers_configuration_checks():
    # dev_appserver (devappserver2/application_configuration.py) refuses any runtime but
    # `custom` when a Dockerfile sits beside app.yaml; the Dockerfile for Cloud Run broke
    # `make appserver-smoke` that way while nothing fast noticed.
    upload = upload_set(load_rules(ROOT), tracked_files(ROOT))
    assert load("app.yaml")["runtime"].startswith("python3")
    assert "Dockerfile" not in upload
    for needed in ("app.yaml", "cron.yaml", "index.yaml", "main.py", "requirements.txt", "gunicorn.conf.py"):
        assert needed in upload, needed
    assert not [path for path in upload if path.startswith(("tests/", "bench/", ".venv"))]
    assert {path.split("/")[0] for path in upload} >= {"app", "cli", "config", "engine", "statemachine", "web"}


def test_gcloudignore_rules_follow_gitignores_reading():
    # Made-up files under notes/ (not Markdown: the docs' link check would look for them).
    rules = [rule for rule in map(parse_rule, ["# c", "", "tests/", "*.pyc", "/Dockerfile", "notes/*.txt",
                                                "!notes/KEEP.txt"]) if rule]
    files = ["tests/a.py", "web/tests", "x/y.pyc", "Dockerfile", "web/Dockerfile", "notes/A.txt",
             "notes/KEEP.txt", "notes/sub/B.txt"]
    assert upload_set(rules, files) == {"web/tests", "web/Dockerfile", "notes/KEEP.txt", "notes/sub/B.txt"}


def test_the_cloud_run_image_upload_keeps_the_dockerfile():
    # `gcloud builds submit --tag` runs `docker build` on the upload: without the
    # Dockerfile the build fails, so docs/CLOUD_RUN.md names an ignore file of its own.
    assert "--ignore-file=.gcloudignore-image" in (ROOT / "docs" / "CLOUD_RUN.md").read_text()
    image_lines = (ROOT / ".gcloudignore-image").read_text().splitlines()
    assert "#!include:.gcloudignore" in image_lines
    image_rules = load_rules(ROOT) + [rule for rule in map(parse_rule, image_lines) if rule]
    upload = upload_set(image_rules, tracked_files(ROOT))
    assert {"Dockerfile", ".dockerignore", "main.py", "requirements.txt"} <= upload
    assert not [path for path in upload if path.startswith(("tests/", "bench/"))]


@pytest.mark.skipif(not (GCLOUD_LIB / "googlecloudsdk").is_dir(), reason="no Google Cloud CLI here")
def test_the_upload_is_what_gclouds_own_reading_of_gcloudignore_gives():
    script = ("import sys; from googlecloudsdk.command_lib.util import gcloudignore as g\n"
              "c = g.GetFileChooserForDir(sys.argv[1], write_on_disk=False)\n"
              "print('\\n'.join(c.GetIncludedFiles(sys.argv[1], include_dirs=False)))")
    env = {"PYTHONPATH": f"{GCLOUD_LIB}:{GCLOUD_LIB / 'third_party'}", "PATH": "/usr/bin:/bin"}
    python = SDK / "platform" / "bundledpythonunix" / "bin" / "python3"
    listing = subprocess.run([str(python if python.exists() else sys.executable), "-c", script, str(ROOT)],
                             check=True, capture_output=True, text=True, env=env).stdout
    assert set(listing.split()) == upload_set(load_rules(ROOT), working_tree_files(ROOT))


def test_cloud_runs_request_timeout_outlasts_the_longest_attempt():
    # With Cloud Run's default (300 s), a 5-9 min synchronous attempt's request ends early,
    # Cloud Tasks retries it while the first still runs, and the retry settles that
    # attempt as interrupted: the target gets two overlapping deliveries.
    guide = (ROOT / "docs" / "CLOUD_RUN.md").read_text()
    deploy = guide[guide.index("gcloud run deploy"):]
    deploy = deploy[:deploy.index("```")]
    timeouts = re.findall(r"--timeout[= ](\d+)(s?)\b", deploy)
    assert len(timeouts) == 1, deploy
    request_timeout = timedelta(seconds=int(timeouts[0][0]))
    assert MAX_ATTEMPT_TIMEOUT["cloud"] < DISPATCH_DEADLINE <= request_timeout <= timedelta(seconds=3600)


def _logged(level: int, outcome: str) -> dict:
    """A `delivered` line as engine/deliveries.py logs it, read back as Cloud Logging's jsonPayload."""
    fields = {"job": "p/j", "invocation": "i", "event": 0, "outcome": outcome}
    record = deliveries_log.makeRecord(deliveries_log.name, level, __file__, 0, "delivered", (), None,
                                       extra={"fields": fields})
    return json.loads(JsonFormatter().format(record))


def _matches(filter_text: str, line: dict) -> bool:
    clauses = re.findall(r'(jsonPayload\.\w+|severity)=("[^"]*"|\w+)', filter_text)
    assert clauses, filter_text
    return all(str(line[key.removeprefix("jsonPayload.")]) == value.strip('"') for key, value in clauses)


def test_the_documented_log_filters_match_the_delivered_lines_the_engine_writes():
    cost = (ROOT / "docs" / "COST.md").read_text()
    exclusion = re.search(r"--add-exclusion='name=sundial-delivered,[^']*filter=([^']*)'", cost)
    assert exclusion, "docs/COST.md: the exclusion of the delivered lines"
    succeeded, failed = _logged(logging.INFO, "succeeded"), _logged(logging.WARNING, "failed")
    assert _matches(exclusion.group(1), succeeded)
    assert not _matches(exclusion.group(1), failed)  # a failed attempt stays in the logs
    deploy = (ROOT / "docs" / "DEPLOY.md").read_text()
    explorer = re.search(r'resource.type="gae_app"\n(jsonPayload\.\w+="delivered")', deploy)
    assert explorer and _matches(explorer.group(1), succeeded) and _matches(explorer.group(1), failed)
