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
        and path.relative_to(ROOT).parts[0] != "sim"  # the simulator builds its own world, as the benches do
        and any(n.startswith("engine.adapters") for n in _imports(path))
        and "adapters" not in path.parts
    ]
    # (app/cloud_queues.py is the composition root's part for the cloud backend's queues.)
    assert sorted(p.relative_to(ROOT).as_posix() for p in pickers) == ["app/bootstrap.py", "app/cloud_queues.py"]


PRODUCT = ("statemachine", "engine", "config", "web", "cli", "app")


def _module_graph() -> dict[str, set[str]]:
    """Every product module and the product modules it imports, at its top or inside a
    function alike (a lazy import hides a cycle; it does not remove it)."""
    modules = {}
    for path in ROOT.glob("*/**/*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        if parts[0] in PRODUCT:
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            modules[name] = path

    def known(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph = {}
    for name, path in modules.items():
        targets = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets |= {known(alias.name) for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                targets.add(known(node.module))
                targets |= {known(f"{node.module}.{alias.name}") for alias in node.names}
        graph[name] = targets - {None, name}
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index, low, on_stack, stack, found, counter = {}, {}, set(), [], [], [0]
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter[0]
                    counter[0] += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_no_import_cycle_anywhere_in_the_product():
    graph = _module_graph()
    assert len(graph) > 80
    assert _cycles(graph) == []


def test_the_cycle_finder_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_config_is_a_leaf_beside_the_engine():
    for path in (ROOT / "config").glob("*.py"):
        reached = _roots(_imports(path)) & {"web", "engine", "cli", "app"}
        assert not reached, f"config/{path.name} imports {sorted(reached)}"


def test_nothing_below_the_composition_root_imports_it():
    for package in ("statemachine", "engine", "config", "web"):
        for path in (ROOT / package).rglob("*.py"):
            assert "app" not in _roots(_imports(path)), path


def test_only_the_settings_module_reads_the_environment():
    readers = []
    for package in PRODUCT:
        for path in (ROOT / package).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.Attribute) and node.attr in ("environ", "getenv") \
                        and isinstance(node.value, ast.Name) and node.value.id == "os":
                    readers.append(path.relative_to(ROOT).as_posix())
    assert sorted(set(readers)) == ["config/settings.py"]


def _attributes(path: Path) -> set[str]:
    return {node.attr for node in ast.walk(ast.parse(path.read_text(), str(path))) if isinstance(node, ast.Attribute)}


def test_web_reads_through_the_read_side_never_the_store():
    # engine/queries.py applies the visibility rules once; a view that reached the
    # store itself could show a job whose deletion has begun.
    readers = [path.name for path in (ROOT / "web").glob("*.py") if "store" in _attributes(path)]
    assert readers == []


def test_the_engines_parts_are_reached_by_name_not_through_one_bag():
    # Each part takes what it uses in its constructor (engine/service.py builds them);
    # only the composition, the API's use cases (operations, backfills, bulk, batch_put) and the web
    # app (its factory and its one accessor) hold the whole Engine.
    holders = sorted(
        path.relative_to(ROOT).as_posix() for path in ROOT.glob("*/**/*.py")
        if path.relative_to(ROOT).parts[0] in PRODUCT
        and "Engine" in {alias.name for node in ast.walk(ast.parse(path.read_text()))
                         if isinstance(node, ast.ImportFrom) and node.module == "engine.service"
                         for alias in node.names}
    )
    assert holders == ["app/bootstrap.py", "engine/backfills.py", "engine/batch_put.py", "engine/bulk.py",
                       "engine/operations.py",
                       "web/app.py", "web/context.py"]
