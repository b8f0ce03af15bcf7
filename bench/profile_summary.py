"""Summarise a py-spy `--format raw` profile (collapsed stacks) in text.

    python bench/profile_summary.py PROFILE.txt [--top 25]

Prints the share of samples (a) per thread group, (b) per bucket: the frames that
matter to the engine's cost model (waiting for the store's write lock, SQLite
BEGIN/COMMIT, queue SQL, the HTTP send, logging, the state machine, row
(de)serialisation), (c) per leaf frame (self time), (d) inclusive per function.
"""

from __future__ import annotations

import argparse
import re
from collections import Counter
from pathlib import Path

STORE = Path(__file__).resolve().parents[1] / "engine" / "adapters" / "local" / "sqlite_store.py"


def _store_line(text: str) -> str:
    """The number of the first line holding `text` inside SqliteJobStore.transaction."""
    inside = False
    for number, source in enumerate(STORE.read_text().splitlines(), start=1):
        if "def transaction" in source:
            inside = True
        elif inside and text in source:
            return str(number)
    return "?"


def _in_transaction(text: str) -> re.Pattern:
    return re.compile(rf"SqliteJobStore\.transaction \(.*sqlite_store\.py:{_store_line(text)}\)")


# Inclusive buckets: each sample goes to the first rule (in this order) that any of its frames matches.
BUCKETS = [
    # The store's process-wide lock: one writer of this process at a time.
    ("waiting for the store's write lock (Python lock)", _in_transaction("with self.write_lock")),
    # With that lock held, BEGIN waits only for another process.
    ("sqlite BEGIN IMMEDIATE", _in_transaction('"BEGIN IMMEDIATE"')),
    ("sqlite COMMIT", _in_transaction('"COMMIT"')),
    ("queue lease (and delete finished)/retry/renew/next_wake SQL",
     re.compile(r"SqliteTaskQueue\.(lease_due|complete|retry|renew|next_wake)")),
    ("HTTP send (requests/urllib3/http.client)", re.compile(r"HttpTarget\._send")),
    ("HTTP target other (address check, headers)", re.compile(r"HttpTarget\.")),
    ("structured logging (log_event/JSON)", re.compile(r"log_event")),
    ("state machine step", re.compile(r"^step \(statemachine/machine\.py")),
    ("record/row (de)serialisation", re.compile(
        r"(job_from_row|record_from_dict|record_to_dict|put_job|get_job|put_invocation|get_invocation"
        r"|invocation_from_row) \(")),
    ("template rendering", re.compile(r"render_target")),
    ("config import", re.compile(r"import_directory|import_project")),
    ("waitress/flask", re.compile(r"waitress|flask|werkzeug")),
]


def parse(path: str):
    for raw in open(path, encoding="utf-8", errors="replace"):
        raw = raw.rstrip("\n")
        if not raw:
            continue
        stack, _, count = raw.rpartition(" ")
        yield stack.split(";"), int(count)


def thread_name(frames: list[str]) -> str:
    head = frames[0]
    name = head.split(": ", 1)[1] if head.startswith("thread (") and ": " in head else head
    return re.sub(r"_\d+$", "", name)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("profile")
    parser.add_argument("--top", type=int, default=20)
    args = parser.parse_args()

    total, threads, leaves, buckets, funcs = 0, Counter(), Counter(), Counter(), Counter()
    for frames, count in parse(args.profile):
        total += count
        threads[thread_name(frames)] += count
        body = frames[1:] if frames[0].startswith("thread (") else frames
        leaves[body[-1] if body else "?"] += count
        for label, rule in BUCKETS:
            if any(rule.search(frame) for frame in body):
                buckets[label] += count
                break
        else:
            buckets["other"] += count
        for name in {re.sub(r" \(.*", "", frame) for frame in body}:
            funcs[name] += count
    print(f"{total} samples")
    print("\n-- by thread")
    for name, count in threads.most_common(10):
        print(f"{count / total:6.1%}  {name}")
    print("\n-- by bucket (first matching rule per sample)")
    for name, count in buckets.most_common():
        print(f"{count / total:6.1%}  {name}")
    print(f"\n-- top {args.top} leaf frames (self)")
    for name, count in leaves.most_common(args.top):
        print(f"{count / total:6.1%}  {name}")
    print(f"\n-- top {args.top} functions (inclusive)")
    for name, count in funcs.most_common(args.top + 15)[: args.top + 15]:
        print(f"{count / total:6.1%}  {name}")


if __name__ == "__main__":
    main()
