"""DESIGN's import rules: the core stays pure, the engine stays free of technology,
adapters and targets do not reach into each other or into the web layer."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TECHNOLOGY = {"google", "flask", "sqlite3", "requests", "waitress", "yaml", "werkzeug", "urllib3"}
# Engine modules that are core, i.e. not adapters or targets.
ENGINE_CORE = [p for p in (ROOT / "engine").glob("*.py")]


def _imports(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
    return names


def _roots(names: set[str]) -> set[str]:
    return {name.split(".")[0] for name in names}


def test_engine_core_imports_no_technology_and_no_outer_layer():
    assert len(ENGINE_CORE) >= 6
    for path in ENGINE_CORE:
        roots = _roots(_imports(path))
        assert not roots & TECHNOLOGY, f"{path.name} imports {sorted(roots & TECHNOLOGY)}"
        assert not roots & {"web", "config", "cli"}, f"{path.name} reaches outwards"


def test_adapters_and_targets_do_not_import_each_other_or_the_web():
    adapters = list((ROOT / "engine" / "adapters").rglob("*.py"))
    targets = list((ROOT / "engine" / "targets").rglob("*.py"))
    for path in adapters:
        names = _imports(path)
        assert not any(n.startswith(("engine.targets", "web", "config", "cli")) for n in names), path
    for path in targets:
        names = _imports(path)
        assert not any(n.startswith(("engine.adapters", "web", "config", "cli")) for n in names), path


def test_web_talks_to_the_engine_not_to_adapters():
    for path in (ROOT / "web").glob("*.py"):
        names = _imports(path)
        assert not any(n.startswith("engine.adapters") for n in names), path
        assert not _roots(names) & {"sqlite3", "requests"}, path


def test_only_the_composition_root_picks_adapters():
    pickers = [
        path for path in ROOT.glob("*/**/*.py")
        if not any(part.startswith(".venv") for part in path.parts)
        and "tests" not in path.parts and "bench" not in path.parts
        and any(n.startswith("engine.adapters") for n in _imports(path))
        and "adapters" not in path.parts
    ]
    assert [p.relative_to(ROOT).as_posix() for p in pickers] == ["config/bootstrap.py"]
