"""Sundial's release number, in one place: pyproject.toml reads it (a dynamic version) and
`sundial --version` prints it. CHANGELOG.md has a section for every release named here."""

__version__ = "0.1.0"
