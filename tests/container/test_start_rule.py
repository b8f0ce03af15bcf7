"""The image's command listens on 0.0.0.0, which `serve` allows only when callers must
prove who they are (docs/REFERENCE.md section 6): API tokens, or Google's identities (an IAP or
ID-token audience). Otherwise it refuses to start, rather than narrowing itself to
127.0.0.1, where in a container it would pass its own health check and answer no one.
The Dockerfile's own CMD is run here, with `python` the test's interpreter."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import requests

from cli.serve import _loopback_unless_tokens
from config.settings import Settings
from tests.container.dockerfile import ROOT, last, words
from tests.e2e.support import free_port, wait_until

IDENTITY_VARIABLES = ("SUNDIAL_API_TOKENS", "SUNDIAL_IAP_AUDIENCE", "SUNDIAL_ID_TOKEN_AUDIENCE", "GAE_APPLICATION")


def image_command(tmp_path: Path, port: int, **env: str) -> subprocess.Popen:
    clean = {k: v for k, v in os.environ.items() if k not in IDENTITY_VARIABLES}
    (tmp_path / "configs").mkdir(exist_ok=True)
    clean.update(PATH=f"{Path(sys.executable).parent}{os.pathsep}{clean.get('PATH', '')}", PORT=str(port),
                 SUNDIAL_DB=str(tmp_path / "s.db"), SUNDIAL_CONFIG_DIR=str(tmp_path / "configs"), **env)
    return subprocess.Popen(words(last("CMD").arguments), cwd=ROOT, env=clean, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def test_with_no_identity_the_image_command_refuses_to_start(tmp_path):
    process = image_command(tmp_path, free_port())
    try:
        output, _ = process.communicate(timeout=30)
    finally:
        process.kill()
    assert process.returncode != 0
    assert "refusing to listen on 0.0.0.0" in output and "SUNDIAL_API_TOKENS" in output
    assert "serving on" not in output


def test_with_tokens_the_image_command_serves_on_port(tmp_path):
    port = free_port()
    process = image_command(tmp_path, port, SUNDIAL_API_TOKENS="tok=user:a@example.com")
    try:
        def healthy():
            try:
                return requests.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200
            except requests.ConnectionError:
                assert process.poll() is None, process.stdout.read() if process.stdout else ""
                return False
        assert wait_until(healthy, timeout=30)
        assert requests.get(f"http://127.0.0.1:{port}/api/v1/projects", timeout=5).status_code == 401
    finally:
        process.terminate()
        output, _ = process.communicate(timeout=20)
    assert f"serving on http://0.0.0.0:{port}" in output and process.returncode == 0


@pytest.mark.parametrize("identity", [{"api_tokens": "t=user:a@example.com"},
                                      {"iap_audience": "/projects/1/global/backendServices/2"},
                                      {"id_token_audience": "https://sundial-abc-uc.a.run.app"},
                                      {"on_app_engine": True}])
def test_any_identity_lets_serve_listen_beyond_loopback(identity):
    settings = replace(Settings(), host="0.0.0.0", **identity)
    assert _loopback_unless_tokens(settings).host == "0.0.0.0"


@pytest.mark.parametrize("host", ["127.0.0.1", "::1", "localhost"])
def test_loopback_needs_no_identity(host):
    assert _loopback_unless_tokens(replace(Settings(), host=host)).host == host


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "10.1.2.3", "sundial.example"])
def test_any_other_address_without_identity_is_refused_when_identity_is_required(host):
    with pytest.raises(SystemExit, match=f"refusing to listen on {host}"):
        _loopback_unless_tokens(replace(Settings(), host=host), require_identity=True)


@pytest.mark.parametrize("host", ["0.0.0.0", "10.1.2.3"])
def test_without_require_identity_another_address_falls_back_to_loopback_and_says_so(host, capsys):
    assert _loopback_unless_tokens(replace(Settings(), host=host)).host == "127.0.0.1"
    assert f"listening on 127.0.0.1 instead of {host}" in capsys.readouterr().out  # stderr is JSON only


def test_a_tokens_value_with_no_token_is_refused_even_with_another_identity():
    settings = replace(Settings(), host="0.0.0.0", api_tokens=",", id_token_audience="https://x.example")
    with pytest.raises(SystemExit, match="holds no token"):
        _loopback_unless_tokens(settings)
