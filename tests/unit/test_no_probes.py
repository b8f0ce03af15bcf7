"""No capability probes in the product: what a part can do is declared in a port
(engine/ports.py, engine/staging_ports.py, engine/holds.py) and passed in by the
composition root, never found by `getattr`/`hasattr` at run time, where neither mypy
nor a reader can follow it.

The calls left are listed below, each with why it is not a probe: reading a field of
our own dataclasses by name, or an attribute a library sets on some of its objects
and not others. The list only shrinks: a test fails on an entry the product no
longer has.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("app", "cli", "config", "engine", "statemachine", "web", "main.py", "sundial_scheduler")
PROBES = ("getattr", "hasattr")

# (module, the call as written) -> why it stays.
ALLOWED: dict[tuple[str, str], str] = {
    # Our own dataclasses' fields, read by name from a list of field names.
    ("statemachine/definition.py", "getattr(self, key)"): "to_dict over the definition's fields",
    ("engine/masking.py", "getattr(stored, field)"): "the masked fields of a definition, by name",
    ("engine/notify.py", "getattr(stored.definition, hook)"): "on_failure or on_recovery, by name",
    # Attributes libraries set on some of their exceptions and not others.
    ("engine/targets/http.py", "getattr(error, 'reason', None)"): "ssl and urllib errors keep their cause there",
    ("engine/targets/pubsub.py", "getattr(error, 'message', '')"): "google.api_core errors' text",
    ("engine/targets/cloud_tasks.py", "getattr(error, 'message', '')"): "google.api_core errors' text",
    ("engine/adapters/cloud/cloud_tasks_queue.py", "getattr(error, 'grpc_status_code', None)"):
        "google.api_core errors' gRPC code",
    ("engine/adapters/cloud/cloud_tasks_queue.py", "getattr(error, 'message', '')"): "google.api_core errors' text",
    ("cli/queues.py", "getattr(error, 'grpc_status_code', None)"): "google.api_core errors' gRPC code",
    ("cli/queues.py", "getattr(error, 'message', '')"): "google.api_core errors' text",
    ("cli/api_client.py", "getattr(error, 'strerror', None)"): "an OSError's text, when it has one",
    ("cli/api_client.py", "getattr(error, 'reason', error)"): "urllib's URLError keeps its cause there",
    # Other libraries' objects.
    ("engine/logs.py", "getattr(record, 'fields', None)"): "a LogRecord's `extra` fields, set by log_event only",
    ("engine/logs.py", "getattr(handler, '_sundial_json', False)"):
        "our mark on a logging handler gunicorn.conf.py may have installed",
    ("web/guard.py", "getattr(response, 'status', None)"): "google.auth's transport response",
    ("web/identity.py", "getattr(response, 'status', None)"): "google.auth's transport response",
    ("config/yamlsource.py", "getattr(self.loader, 'aliases', 1)"): "PyYAML's composer state",
    ("web/attention.py", "getattr(record, 'paused_by', '')"): "a record written by a version that kept who paused",
    ("web/app.py", "getattr(settings, 'on_app_engine', False)"): "the Flask app's settings, a test's stand-in too",
    ("web/app.py", "getattr(settings, 'host', '127.0.0.1')"): "the Flask app's settings, a test's stand-in too",
}


def _probes() -> dict[tuple[str, str], int]:
    """Every getattr/hasattr call in the product: (module, the call's source) -> count."""
    found: dict[tuple[str, str], int] = {}
    for top in PRODUCT:
        path = ROOT / top
        for module in [path] if path.is_file() else sorted(path.rglob("*.py")):
            tree = ast.parse(module.read_text(), str(module))
            for node in ast.walk(tree):
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in PROBES:
                    key = (module.relative_to(ROOT).as_posix(), ast.unparse(node))
                    found[key] = found.get(key, 0) + 1
    return found


def test_no_getattr_or_hasattr_in_the_product_but_the_listed():
    probes = sorted(key for key in _probes() if key not in ALLOWED)
    assert probes == [], "declare the capability in a port and pass it in; or list why this is no probe"


def test_every_listed_call_is_still_there():
    assert sorted(set(ALLOWED) - set(_probes())) == [], "the call is gone: take it off ALLOWED"


def test_the_finder_sees_a_probe(tmp_path):
    tree = ast.parse("def f(x):\n    return getattr(x, 'stage', None) or hasattr(x, 'warm')\n")
    calls = [ast.unparse(node) for node in ast.walk(tree)
             if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in PROBES]
    assert calls == ["getattr(x, 'stage', None)", "hasattr(x, 'warm')"]
