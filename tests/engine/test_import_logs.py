"""What the config import tells the logs: progress through a long file, a line when a
project is done, and an ERROR for a file that does not load."""

from __future__ import annotations

from app.importer import import_directory
from engine import config_import
from engine.adapters.memory import build_memory_backend
from engine.clock import SystemClock
from engine.service import build_engine
from engine.targets import build_targets
from statemachine.policy import Tuning


def test_a_long_import_shows_progress_and_a_broken_file_is_an_error(tmp_path, log_lines, monkeypatch):
    monkeypatch.setattr(config_import, "PROGRESS_JOBS", 2)
    configs = tmp_path / "configs"
    configs.mkdir()
    jobs = "".join(f"  - id: j{i}\n    schedule: triggered\n    target: {{http: {{url: 'https://x.example.com/'}}}}\n"
                   for i in range(5))
    (configs / "big.yaml").write_text("jobs:\n" + jobs)
    (configs / "broken.yaml").write_text("jobs: [\n")
    store, _ = build_memory_backend()
    store.jobs_per_commit = 1  # progress is counted per transaction: one job each here
    built = build_engine(store, build_targets("local"), SystemClock(), Tuning(), secret=b"t")
    import_directory(built.configs, configs)
    entries = log_lines()
    progress = [(e["done"], e["total"]) for e in entries if e["message"] == "importing project"]
    assert progress == [(2, 5), (4, 5)]
    assert all(e["jobs_per_second"] > 0 for e in entries if e["message"] == "importing project")
    [done] = [e for e in entries if e["message"] == "imported project"]
    assert (done["project"], done["jobs"], done["severity"]) == ("big", 5, "INFO")
    [error] = [e for e in entries if e["message"] == "config error"]
    assert (error["project"], error["severity"]) == ("broken", "ERROR")
    assert "broken.yaml:2" in error["error"]
