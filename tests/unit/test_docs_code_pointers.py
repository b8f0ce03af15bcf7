"""The documents point at code that exists: every `.py` file they name is in the
repository, and every `module.name` or `Class.name` they name is defined there. A
pointer that outlived a rename is how a reader first gets lost (a walk through a
document that names a function no longer there)."""

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCUMENTS = sorted((ROOT / "docs").glob("*.md")) + [ROOT / "README.md"]

_FILE = re.compile(r"`((?:[\w.-]+/)*[\w-]+\.py)`")
_POINTER = re.compile(r"`([A-Za-z_]\w*)\.([A-Za-z_]\w*)`")
# Dotted names that are configuration fields or outside modules, not Sundial's code
# (`retry.max_attempts`, `app.yaml`, `http.client`).
NOT_CODE = {"retry", "fanout", "catchup", "app", "cron", "http"}
OUTSIDE_FILES = {"dev_appserver.py"}  # the Google Cloud CLI's
FILE_KINDS = {"py", "yaml", "json", "md", "txt", "toml", "ini", "db"}  # `queue.yaml` names a file


def _python_files() -> list[Path]:
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "*.py"],
                            cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    return [ROOT / name for name in listed if (ROOT / name).is_file()]


def _where_defined() -> tuple[dict[str, list[Path]], dict[str, list[Path]]]:
    modules: dict[str, list[Path]] = {}
    classes: dict[str, list[Path]] = {}
    for path in _python_files():
        modules.setdefault(path.stem, []).append(path)
        for name in re.findall(r"^\s*class (\w+)", path.read_text(encoding="utf-8"), re.M):
            classes.setdefault(name, []).append(path)
    return modules, classes


def _defines(path: Path, name: str) -> bool:
    pattern = rf"^\s*(?:async\s+)?(?:def|class)\s+{name}\b|^\s*(?:self\.)?{name}\s*(?::[^=\n]+)?=|^\s+{name}:"
    return re.search(pattern, path.read_text(encoding="utf-8"), re.M) is not None


def _missing_files(text: str, modules: dict[str, list[Path]]) -> list[str]:
    """A full path must exist as written; a bare file name must be some file's name."""
    return sorted(name for name in set(_FILE.findall(text)) - OUTSIDE_FILES
                  if not ((ROOT / name).is_file() if "/" in name else Path(name).stem in modules))


def _missing_pointers(text: str, modules: dict[str, list[Path]], classes: dict[str, list[Path]]) -> list[str]:
    missing = []
    for owner, name in sorted(set(_POINTER.findall(text))):
        places = [] if owner in NOT_CODE or name in FILE_KINDS else modules.get(owner) or classes.get(owner) or []
        if places and not any(_defines(path, name) for path in places):
            missing.append(f"{owner}.{name}")
    return missing


def test_every_file_and_definition_the_documents_name_exists():
    modules, classes = _where_defined()
    missing = {}
    for document in DOCUMENTS:
        text = document.read_text(encoding="utf-8")
        if found := _missing_files(text, modules) + _missing_pointers(text, modules, classes):
            missing[document.name] = found
    assert missing == {}


def test_the_check_sees_a_stale_pointer():
    modules, classes = _where_defined()
    text = "`statemachine/gone.py`, `nowhere.py`, `ticks.stage_pending`, `ticks.gone`, `TaskRunner.vanished`"
    assert _missing_files(text, modules) == ["nowhere.py", "statemachine/gone.py"]
    assert _missing_pointers(text, modules, classes) == ["TaskRunner.vanished", "ticks.gone"]
