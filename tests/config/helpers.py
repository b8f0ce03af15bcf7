"""Small helpers shared by the config tests."""

from __future__ import annotations

import textwrap

from config.loader import parse_project_text, validate_text
from config.model import ProjectConfig

NAME = "p.yaml"


def text(source: str) -> str:
    return textwrap.dedent(source).lstrip("\n")


def errors(source: str, backend: str = "local") -> list[str]:
    """Every error of a project document, as the CLI prints them."""
    return [str(error) for error in validate_text(text(source), NAME, "p", backend)]


def project(source: str, backend: str = "local") -> ProjectConfig:
    return parse_project_text("p", text(source), NAME, backend)
