"""The repository's Dockerfile read as instructions, for the tests that check it."""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"


@dataclass(frozen=True)
class Instruction:
    keyword: str  # upper case: FROM, COPY, ...
    arguments: str  # the rest of the logical line, continuations joined


def instructions(path: Path = DOCKERFILE) -> list[Instruction]:
    found, pending = [], ""
    for line in path.read_text().splitlines():
        stripped = line.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        logical, pending = pending + stripped, ""
        keyword, _, rest = logical.partition(" ")
        found.append(Instruction(keyword.upper(), rest.strip()))
    return found


def words(arguments: str) -> list[str]:
    """An instruction's arguments: the exec form (a JSON list) or the shell form."""
    return json.loads(arguments) if arguments.startswith("[") else shlex.split(arguments)


def last(keyword: str) -> Instruction:
    matching = [i for i in instructions() if i.keyword == keyword]
    assert matching, f"Dockerfile: no {keyword} instruction"
    return matching[-1]


def copied_sources() -> list[str]:
    """What the image takes from the build context, as the COPY lines name it."""
    sources = []
    for instruction in instructions():
        if instruction.keyword == "COPY":
            parts = [w for w in words(instruction.arguments) if not w.startswith("--")]
            sources += parts[:-1]
    return sources
