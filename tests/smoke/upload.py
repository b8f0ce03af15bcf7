"""The files `gcloud app deploy` would upload: the app's directory less what
`.gcloudignore` leaves out.

gcloud reads `.gcloudignore` with gitignore's rules (googlecloudsdk
command_lib/util/gcloudignore.py): `#` comments, `!` negation (the last matching
line wins), a trailing `/` matches directories only, a pattern with a `/` elsewhere is
anchored at the app's directory, one without matches a name at any depth, `*` stays
within one path segment and `**` crosses them. An ignored directory takes everything
under it along. The smoke stages exactly this set, and tests/cloud checks it against
dev_appserver's configuration checks without starting anything.
"""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class IgnoreRule:
    regex: re.Pattern[str]
    negated: bool
    directories_only: bool

    def matches(self, path: str, is_dir: bool) -> bool:
        return (is_dir or not self.directories_only) and bool(self.regex.fullmatch(path))


def _translate(glob: str) -> str:
    out, index = [], 0
    while index < len(glob):
        if glob.startswith("**/", index):
            out.append("(?:.*/)?")
            index += 3
        elif glob.startswith("**", index):
            out.append(".*")
            index += 2
        else:
            char = glob[index]
            out.append({"*": "[^/]*", "?": "[^/]"}.get(char, re.escape(char)))
            index += 1
    return "".join(out)


def parse_rule(line: str) -> IgnoreRule | None:
    """One line of `.gcloudignore` as a rule, or None for a blank line or a comment."""
    text = line.rstrip()
    if not text or text.startswith("#"):
        return None
    negated = text.startswith("!")
    text = text[1:] if negated else text
    directories_only = text.endswith("/")
    text = text.rstrip("/")
    anchored = "/" in text
    body = _translate(text.lstrip("/"))
    regex = re.compile(body if anchored else f"(?:.*/)?{body}")
    return IgnoreRule(regex, negated, directories_only)


def load_rules(root: Path) -> list[IgnoreRule]:
    lines = (root / ".gcloudignore").read_text().splitlines()
    return [rule for rule in map(parse_rule, lines) if rule is not None]


def is_ignored(rules: list[IgnoreRule], path: str, is_dir: bool) -> bool:
    """Whether `path` (relative, `/`-separated) itself is left out; the last match wins."""
    ignored = False
    for rule in rules:
        if rule.matches(path, is_dir):
            ignored = not rule.negated
    return ignored


def _under_ignored_directory(rules: list[IgnoreRule], path: str) -> bool:
    parts = path.split("/")
    return any(is_ignored(rules, "/".join(parts[:depth]), True) for depth in range(1, len(parts)))


def upload_set(rules: list[IgnoreRule], files: list[str]) -> set[str]:
    """Those of `files` (relative paths of files) that gcloud would upload."""
    return {path for path in files
            if not _under_ignored_directory(rules, path) and not is_ignored(rules, path, False)}


def tracked_files(root: Path) -> list[str]:
    listing = subprocess.run(["git", "-C", str(root), "ls-files", "-z"], check=True,
                             capture_output=True, text=True).stdout
    return [path for path in listing.split("\0") if path]


def working_tree_files(root: Path) -> list[str]:
    """Every file under `root`, not descending into directories the rules leave out."""
    rules, found = load_rules(root), []
    for directory, subdirectories, names in os.walk(root):
        relative = Path(directory).relative_to(root).as_posix()
        prefix = "" if relative == "." else relative + "/"
        subdirectories[:] = [name for name in subdirectories
                             if not is_ignored(rules, prefix + name, True)]
        found.extend(prefix + name for name in names)
    return found
