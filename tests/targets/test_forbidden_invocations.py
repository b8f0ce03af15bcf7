"""Target safety as the invocation records it (docs/REFERENCE.md section 6): the engine with the
real HTTP target of each backend, jobs whose URLs get past validation (the definition
is imported as stored, or the name only resolves badly at delivery time), and the
invocation FAILED with a reason that starts with `forbidden target` and names the
address. Nothing reaches the receiver."""

from __future__ import annotations

import socket
from datetime import timedelta

import pytest

from engine.config_import import JobSnapshot, ProjectSnapshot
from engine.targets.http import HttpTarget
from statemachine.definition import JobDefinition
from statemachine.policy import JobPolicy
from tests.engine.harness import START, Harness


def run_job(tmp_path, backend: str, url: str, allowed_hosts=()) -> dict:
    h = Harness(tmp_path)
    h.engine.deliveries.targets["http"] = HttpTarget(backend)
    definition = JobDefinition(id="j", schedule="every 1m", target={"http": {"url": url, "timeout": "2s"}})
    job = JobSnapshot("j", JobPolicy(schedule_text="every 1m", revision="v1"), definition, False)
    h.engine.configs.import_project(ProjectSnapshot("proj", "v1", jobs=(job,),
                                             settings={"allowed_hosts": list(allowed_hosts)}))
    h.run_until(START + timedelta(minutes=1, seconds=5))
    rows = h.invocations("j")
    assert len(rows) == 1, rows
    return {"status": rows[0].status, "reason": rows[0].reason}


@pytest.mark.parametrize("backend", ["local", "cloud"])
@pytest.mark.parametrize("url, address", [
    ("http://169.254.169.254/computeMetadata/v1/", "169.254.169.254"),
    ("http://metadata.google.internal/computeMetadata/v1/", "metadata.google.internal"),
])
def test_the_metadata_server_is_refused_on_both_backends(tmp_path, backend, url, address):
    assert run_job(tmp_path, backend, url) == {"status": "FAILED", "reason": f"forbidden target {address}"}


@pytest.mark.parametrize("url, address", [
    ("http://127.0.0.1:{port}/", "127.0.0.1"),
    ("http://10.0.0.1/", "10.0.0.1"),
    ("http://localhost:{port}/", ("127.0.0.1", "::1")),
    ("http://127.0.0.1:{port}/redirect-to?url=http://localhost:{port}/", ("127.0.0.1", "::1")),
])
def test_loopback_private_names_and_redirects_are_refused_on_the_cloud_backend(tmp_path, receiver, url, address):
    port = receiver.server_address[1]
    # The redirect's first hop is allowed by name; where it leads is not.
    allowed = ("127.0.0.1",) if "redirect" in url else ()
    result = run_job(tmp_path, "cloud", url.format(port=port), allowed)
    assert result["status"] == "FAILED" and result["reason"].startswith("forbidden target ")
    assert result["reason"].split()[-1] in (address if isinstance(address, tuple) else (address,))
    assert [r.path for r in receiver.requests] == ([] if "redirect" not in url else [
        f"/redirect-to?url=http://localhost:{port}/"])


def test_a_name_that_rebinds_to_the_metadata_server_is_refused_at_delivery(tmp_path, monkeypatch):
    real = socket.getaddrinfo

    def rebinding(host, port, *args, **kwargs):
        return real("169.254.169.254" if host == "innocent.test" else host, port, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", rebinding)
    assert run_job(tmp_path, "local", "http://innocent.test/") == {
        "status": "FAILED", "reason": "forbidden target 169.254.169.254"}
