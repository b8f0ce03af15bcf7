"""The image's recipe, checked without a container engine: a slim Python base, a user
that is not root, a health check on /healthz, `serve` on $PORT, and a build context of
exactly what the image copies, which must exist and be every package the app has."""

from __future__ import annotations

import re

from tests.container.dockerfile import DOCKERIGNORE, ROOT, copied_sources, instructions, last, words


def test_the_base_is_a_slim_python_named_by_an_argument():
    base = [i for i in instructions() if i.keyword == "ARG" and i.arguments.startswith("PYTHON_IMAGE=")]
    assert base and re.fullmatch(r"PYTHON_IMAGE=python:3\.1[23]-slim", base[0].arguments)
    assert [i.arguments for i in instructions() if i.keyword == "FROM"] == ["${PYTHON_IMAGE}"]


def test_the_server_runs_as_a_user_that_is_not_root():
    user = last("USER").arguments
    uid, _, gid = user.partition(":")
    # Numeric, so that a runtime that refuses root (runAsNonRoot) can tell without /etc/passwd.
    assert uid.isdigit() and int(uid) != 0 and (not gid or int(gid) != 0), user
    after_user = instructions()[instructions().index(last("USER")):]
    assert not [i for i in after_user if i.keyword == "RUN"], "RUN after USER would run as the server's user"


def test_the_health_check_asks_healthz_on_the_serving_port():
    check = last("HEALTHCHECK").arguments
    assert "CMD" in check and "/healthz" in check and "PORT" in check


def test_the_command_is_serve_on_all_addresses_and_cloud_runs_port():
    command = words(last("CMD").arguments)
    assert command[:2] == ["sh", "-c"], command
    script = command[2]
    assert script.startswith("exec "), "serve must be PID 1 to receive SIGTERM"
    assert "main.py serve" in script and "--host 0.0.0.0" in script and "--require-identity" in script
    assert '--port "${PORT:-8080}"' in script


def test_every_copied_path_exists_and_the_context_holds_nothing_else():
    sources = copied_sources()
    for source in sources:
        assert (ROOT / source).exists(), f"Dockerfile copies {source}, which the repository lacks"
    lines = [line.strip() for line in DOCKERIGNORE.read_text().splitlines()
             if line.strip() and not line.startswith("#")]
    assert lines[0] == "*", ".dockerignore: leave everything out first, then let in what is copied"
    allowed = {line[1:] for line in lines if line.startswith("!")}
    assert allowed == set(sources), (allowed, sources)
    assert not {"tests/", ".venv/", "bench/", "examples/"} & set(sources)


def test_every_package_of_the_app_is_in_the_image():
    # (The simulator, like the tests and the benchmarks, is a tool of the repository's, not the app's;
    # sundial_scheduler/ is the installed package's entry, and the image runs main.py from /app.)
    packages = {f"{path.parent.name}/" for path in ROOT.glob("*/__init__.py")} - {
        "tests/", "bench/", "sim/", "sundial_scheduler/"}
    missing = packages - set(copied_sources())
    assert not missing, f"Dockerfile: packages not copied into the image: {sorted(missing)}"
    assert {"main.py", "requirements.txt"} <= set(copied_sources())


def test_the_cloud_run_guide_deploys_what_the_image_expects():
    guide = (ROOT / "docs" / "CLOUD_RUN.md").read_text()
    deploy = guide[guide.index("gcloud run deploy"):]
    deploy = deploy[:deploy.index("```")]
    # serve runs the import, the watchdog and the clean-up itself: CPU outside requests, one instance up.
    for needed in ("--no-cpu-throttling", "--min-instances=1", "--service-account=", "SUNDIAL_BACKEND=cloud",
                   "GOOGLE_CLOUD_PROJECT=", "SUNDIAL_TASKS_LOCATION=", "SUNDIAL_TASKS_QUEUE=",
                   "SUNDIAL_TASKS_SERVICE_ACCOUNT=", "SUNDIAL_TASKS_TARGET=http", "SUNDIAL_SERVICE_URL=",
                   "--set-secrets=SUNDIAL_API_TOKENS="):
        assert needed in deploy, needed
    environment = " ".join(i.arguments for i in instructions() if i.keyword == "ENV")
    config_dir = re.search(r"SUNDIAL_CONFIG_DIR=(\S+)", environment)
    assert config_dir and f"mount-path={config_dir.group(1)}" in guide
    assert f"COPY configs/ {config_dir.group(1)}/" in guide
