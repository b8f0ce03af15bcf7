"""docs/ARCHITECTURE.md's walks of the real paths name the threads each step runs on:
every `sundial-...` thread they name is one the product starts (by that name, or as the
prefix of a pool's numbered threads), and each walk is a numbered list that names the
modules it passes through as paths that exist. (test_docs_code_pointers.py holds the
`module.name` pointers.)"""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("app", "cli", "config", "engine", "statemachine", "web")
SECTION = "## The paths an occurrence really takes"


def _section() -> str:
    text = (ROOT / "docs" / "ARCHITECTURE.md").read_text(encoding="utf-8")
    start = text.index(SECTION)
    return text[start:text.index("\n## ", start + len(SECTION))]


def _thread_names_started() -> set[str]:
    source = "\n".join(path.read_text(encoding="utf-8") for part in PRODUCT for path in (ROOT / part).rglob("*.py"))
    return set(re.findall(r"[\"'](sundial-[a-z-]+)", source))


def _walks(section: str) -> list[str]:
    return re.split(r"\n\*\*\d\. ", section)[1:]


def test_every_thread_the_walks_name_is_started_by_the_product():
    named = {name.removesuffix("-N") for name in re.findall(r"`(sundial-[a-z-]+(?:-N)?)`", _section())}
    assert named, "the walks name their threads"
    assert sorted(named - _thread_names_started()) == []


def test_three_walks_each_a_numbered_list_of_paths_that_exist():
    walks = _walks(_section())
    assert len(walks) == 3
    for walk in walks:
        steps = re.findall(r"^(\d+)\. ", walk, re.M)
        assert steps == [str(n) for n in range(1, len(steps) + 1)] and len(steps) >= 3
        paths = re.findall(r"`((?:app|cli|config|engine|statemachine|web)/[\w/]+\.py)`", walk)
        assert paths and all((ROOT / path).is_file() for path in paths), paths


def test_the_check_sees_a_thread_nobody_starts():
    assert "sundial-nowhere" not in _thread_names_started()
    assert {"sundial-record", "sundial-stage", "sundial-writer"} <= _thread_names_started()
