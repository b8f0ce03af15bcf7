"""No file points at a document the repository does not hold: every `.md` path and
every `docs/...` path named in the README, the docs, the code, the tests and the
benchmarks exists, Markdown links resolve, and nothing refers to the team's
specification or notes, which live outside the repository."""

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# A path that does not start right after a word character, a slash or a dot (so not the
# tail of a URL or of a longer path).
_MD_PATH = re.compile(r"(?<![\w/.:-])((?:[\w.-]+/)*[\w-]+\.md)\b")
_DOCS_PATH = re.compile(r"(?<![\w/.:-])(docs/[\w./-]*[\w/])")
_LINK = re.compile(r"\]\(([^)\s]+)\)")
_OUTSIDE = re.compile(r"\bCONTRACT\b|\b(?:DESIGN|STYLE)\.md\b|\.\./shared\b")

# Files another branch rewrites (the command line's help texts and the metrics page);
# empty this set once they are merged, and do not grow it.
LEFT_TO_OTHER_BRANCHES: set[str] = set()


def _files() -> list[Path]:
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            capture_output=True, text=True, check=True).stdout.split()
    kept = [ROOT / name for name in listed if name.endswith((".md", ".py", ".yaml", ".txt", ".ini", ".toml",
                                                             ".html", ".cfg")) or name == "Makefile"]
    # A release's code frozen as released (tests/upgrade/release_0_1_0) says what it said then.
    return [path for path in kept if path.is_file() and "/release_0_1_0/statemachine/" not in path.as_posix()]


def _exists(name: str, near: Path) -> bool:
    """From the root, from the naming file's folder, or a bare name of docs/ (`DEPLOY.md`)."""
    return any((base / name).exists() for base in (ROOT, near.parent, ROOT / "docs"))


def _missing_in(path: Path) -> list[str]:
    text = path.read_text(encoding="utf-8", errors="replace")
    named = set(_MD_PATH.findall(text)) | set(_DOCS_PATH.findall(text))
    if path.suffix == ".md":
        named |= {link.split("#")[0] for link in _LINK.findall(text)
                  if not re.match(r"[a-z]+:|#", link) and link.split("#")[0]}
    return sorted(name for name in named if not _exists(name, path))


def test_every_named_document_exists():
    missing = {str(path.relative_to(ROOT)): names for path in _files()
               if path.name != Path(__file__).name and (names := _missing_in(path))}
    assert missing == {}


def test_nothing_refers_to_documents_outside_the_repository():
    files = [path for path in _files() if path.name != Path(__file__).name
             and str(path.relative_to(ROOT)) not in LEFT_TO_OTHER_BRANCHES]
    found = [f"{path.relative_to(ROOT)}:{number}: {line.strip()}" for path in files
             for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1)
             if _OUTSIDE.search(line)]
    assert found == []


def test_the_checks_see_a_missing_document(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("See docs/NOWHERE.md, [x](GONE.md) and CONTRACT section 2.\n", encoding="utf-8")
    assert _missing_in(page) == ["GONE.md", "docs/NOWHERE.md"]
    assert _OUTSIDE.search(page.read_text(encoding="utf-8"))
