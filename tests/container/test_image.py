"""Build the Dockerfile and run the image with a real container engine (podman, else
docker). Slow (a pip install of the pins) and it needs an engine and a base image, so it
runs only with SUNDIAL_CONTAINER_TEST=1, and skips, saying why, where either is missing.

- SUNDIAL_CONTAINER_ENGINE: the engine's command (default: podman, else docker, whichever
  answers `info`).
- SUNDIAL_CONTAINER_BASE: the base image (default python:3.13-slim, pulled if absent).
  Where no registry can be reached, tests/container/make_base.sh makes a Debian stand-in.

On machines where the default OCI runtime cannot set up cgroups or raise resource limits
(a VM without systemd, say), podman is retried with runc, cgroupfs and limits within the
host's own; the options that worked are printed."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import time

import pytest
import requests

from tests.container.dockerfile import ROOT, last, words
from tests.e2e.support import free_port, wait_until
from tests.support.emulators import cloud_server_env

pytestmark = pytest.mark.skipif(os.environ.get("SUNDIAL_CONTAINER_TEST") != "1",
                                reason="builds a container image: set SUNDIAL_CONTAINER_TEST=1")

TAG = "localhost/sundial-image-test:latest"
TOKENS = "tok-a=user:a@example.com"
FALLBACK = (["--runtime", "runc", "--cgroup-manager=cgroupfs"],
            ["--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024"])


def run(argv: list[str], timeout: float = 120, check: bool = False) -> subprocess.CompletedProcess:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    if check and done.returncode != 0:
        raise AssertionError(f"{shlex.join(argv)} exited {done.returncode}:\n{done.stdout}\n{done.stderr}")
    return done


def find_engine() -> list[str]:
    named = os.environ.get("SUNDIAL_CONTAINER_ENGINE")
    candidates = [shlex.split(named)] if named else [["podman"], ["docker"]]
    problems = []
    for engine in candidates:
        if not shutil.which(engine[0]):
            problems.append(f"{engine[0]}: not installed")
            continue
        answer = run([*engine, "info"], timeout=60)
        if answer.returncode == 0:
            return engine
        problems.append(f"{engine[0]} info: {answer.stderr.strip()[-300:]}")
    pytest.skip("no container engine: " + "; ".join(problems))


def ensure_base(engine: list[str]) -> str:
    base = os.environ.get("SUNDIAL_CONTAINER_BASE", "python:3.13-slim")
    if run([*engine, "image", "inspect", base]).returncode == 0:
        return base
    pulled = run([*engine, "pull", base], timeout=300)
    if pulled.returncode != 0:
        pytest.skip(f"base image {base} cannot be pulled ({pulled.stderr.strip()[-300:]}); "
                    "set SUNDIAL_CONTAINER_BASE (tests/container/make_base.sh makes one)")
    return base


class Engine:
    def __init__(self, engine: list[str]):
        self.engine, self.global_options, self.run_options = engine, [], []

    def __call__(self, *argv: str, **kwargs) -> subprocess.CompletedProcess:
        return run([*self.engine, *self.global_options, *argv], **kwargs)

    def build(self, base: str) -> float:
        started = time.monotonic()
        form = ["--format", "docker"] if self.engine[0] == "podman" else []  # keeps HEALTHCHECK
        self("build", "--no-cache", *form, "--build-arg", f"PYTHON_IMAGE={base}", "-t", TAG, str(ROOT),
             timeout=900, check=True)
        return time.monotonic() - started

    def settle_options(self, base: str) -> None:
        """The first set of options with which the base runs at all (the build's RUN steps too)."""
        tried = [([], [])] + ([FALLBACK] if self.engine[0] == "podman" else [])
        for global_options, run_options in tried:
            self.global_options, self.run_options = global_options, run_options
            answer = self("run", "--rm", *run_options, base, "true")
            if answer.returncode == 0:
                print(f"engine {shlex.join(self.engine + global_options)}, run options {run_options}")
                return
        pytest.fail(f"no container runs here: {answer.stderr.strip()[-500:]}")

    def start(self, name: str, *options: str) -> subprocess.CompletedProcess:
        self("rm", "-f", name)
        return self("run", "-d", "--name", name, *self.run_options, *options, TAG, check=True)


def healthy(url: str) -> bool:
    try:
        return requests.get(f"{url}/healthz", timeout=2).status_code == 200
    except requests.ConnectionError:
        return False


@pytest.fixture(scope="module")
def engine():
    found = Engine(find_engine())
    base = ensure_base(found.engine)
    found.settle_options(base)
    seconds = found.build(base)
    size = found("image", "inspect", "--format", "{{.Size}}", TAG, check=True).stdout.strip()
    print(f"built {TAG} on {base} in {seconds:.1f} s, {int(size) / 2**20:.0f} MiB")
    yield found
    found("rmi", "-f", TAG)


def test_the_image_runs_as_its_own_user(engine):
    uid = engine("run", "--rm", *engine.run_options, TAG, "id", "-u", check=True).stdout.strip()
    assert uid.isdigit() and uid != "0"
    answer = engine("run", "--rm", *engine.run_options, TAG, "sh", "-c",
                    "test ! -e /app/tests && test ! -e /app/.venv && test -w /data && ! test -w /app && echo ok")
    assert answer.stdout.strip() == "ok", answer.stdout + answer.stderr


def test_with_no_identity_the_container_refuses_to_start(engine):
    answer = engine("run", "--rm", *engine.run_options, TAG, timeout=60)
    assert answer.returncode != 0
    assert "refusing to listen on 0.0.0.0" in answer.stdout + answer.stderr


def test_with_tokens_it_serves_on_port_and_stops_cleanly_on_sigterm(engine):
    name, port = "sundial-image-test", free_port()
    engine.start(name, "-p", f"127.0.0.1:{port}:9090", "-e", "PORT=9090", "-e", f"SUNDIAL_API_TOKENS={TOKENS}",
                 "-e", "SUNDIAL_ADMINS=user:a@example.com", "-v", f"{ROOT / 'examples' / 'configs'}:/app/configs:ro")
    try:
        url = f"http://127.0.0.1:{port}"
        assert wait_until(lambda: healthy(url), timeout=60), engine("logs", name).stderr
        assert requests.get(f"{url}/api/v1/projects", timeout=5).status_code == 401
        projects = requests.get(f"{url}/api/v1/projects", headers={"Authorization": "Bearer tok-a"}, timeout=5)
        assert projects.status_code == 200 and projects.json()["projects"], projects.text
        health = words(last("HEALTHCHECK").arguments.partition("CMD")[2].strip())
        assert engine("exec", name, *health).returncode == 0
        assert engine("stop", "-t", "20", name, timeout=60).returncode == 0
        state = engine("inspect", "--format", "{{.State.ExitCode}}", name, check=True).stdout.strip()
        logs = engine("logs", name)
        assert state == "0" and "sundial: stopping" in logs.stdout + logs.stderr
    finally:
        engine("rm", "-f", name)


def test_on_the_cloud_backend_the_image_runs_a_job_through_datastore_and_cloud_tasks(
        engine, datastore_emulator, tasks_emulator, tmp_path):
    """The cloud clients (ndb, grpc, Cloud Tasks) work inside the image: a job every second,
    its chain on the emulators, Cloud Tasks calling the container back over HTTP."""
    name, port = "sundial-image-cloud", free_port()
    configs = tmp_path / "configs"
    configs.mkdir()
    project = f"image{port}"  # the emulators live for the whole session: a project of its own
    (configs / f"{project}.yaml").write_text("jobs:\n  - id: tick\n    schedule: every 1s\n    target: {noop: {}}\n")
    configs.chmod(0o755)
    (configs / f"{project}.yaml").chmod(0o644)
    env = cloud_server_env(datastore_emulator, tasks_emulator, tasks_emulator.queue.rsplit("/", 1)[1], port)
    env.update(PORT=str(port), SUNDIAL_API_TOKENS=TOKENS, SUNDIAL_ADMINS="user:a@example.com")
    engine.start(name, "--network", "host", *[f"--env={k}={v}" for k, v in env.items()],
                 "-v", f"{configs}:/app/configs:ro")
    try:
        url, auth = f"http://127.0.0.1:{port}", {"Authorization": "Bearer tok-a"}
        assert wait_until(lambda: healthy(url), timeout=60), engine("logs", name).stderr

        def succeeded():
            answer = requests.get(f"{url}/api/v1/projects/{project}/jobs/tick/invocations", headers=auth, timeout=5)
            return answer.ok and [i for i in answer.json()["invocations"] if i["status"] == "SUCCEEDED"]
        assert wait_until(succeeded, timeout=60), engine("logs", name).stdout + engine("logs", name).stderr
    finally:
        engine("rm", "-f", name)
