"""The pure core imports only the standard library and itself (croniter is allowed
by the design, though the core no longer needs it)."""

import ast
import sys
from pathlib import Path

CORE = Path(__file__).resolve().parents[2] / "statemachine"
# urllib.parse only splits and quotes text; the rest of urllib opens connections.
PURE_PARTS = {"urllib.parse"}
ALLOWED = set(sys.stdlib_module_names) | {"croniter", "statemachine"} | PURE_PARTS
# Standard-library modules that would let the core reach the outside world.
FORBIDDEN = {"socket", "sqlite3", "subprocess", "random", "secrets", "urllib", "http", "os"}


def _root(name: str) -> str:
    return name if name in PURE_PARTS else name.split(".")[0]


def _imported_roots(path: Path) -> set[str]:
    roots = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            roots |= {_root(alias.name) for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            roots.add(_root(node.module))
    return roots


def test_core_imports_only_the_standard_library_and_croniter():
    files = sorted(CORE.glob("*.py"))
    assert len(files) >= 10
    for path in files:
        roots = _imported_roots(path)
        assert roots <= ALLOWED, f"{path.name} imports {sorted(roots - ALLOWED)}"
        assert not roots & FORBIDDEN, f"{path.name} imports {sorted(roots & FORBIDDEN)}"


def test_core_never_reads_the_clock():
    for path in sorted(CORE.glob("*.py")):
        text = path.read_text()
        for call in ("datetime.now(", ".utcnow(", "time.time(", "date.today(", "monotonic("):
            assert call not in text, f"{path.name} calls {call}"


def test_the_checker_sees_a_forbidden_import(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("import requests\nfrom flask import Flask\nfrom urllib.request import urlopen\n"
                   "from urllib.parse import unquote\n")
    assert _imported_roots(bad) - ALLOWED == {"requests", "flask"}
    assert _imported_roots(bad) & FORBIDDEN == {"urllib"}
