"""The CPU one small HTTP answer costs the batch writer's thread to read, by the writer's
own framing (engine/targets/http_framing.py) and by h11 (new per request, and kept per
connection across keep-alive cycles).

    .venv/bin/python bench/answer_parsing.py [--answers 20000]

At a burst's instant the one writer thread parses every answer, so this cost is paid once
per delivery on the hot path (docs/PERFORMANCE.md, "h11 in the batch writer"). h11 comes
with requirements-dev.txt. CPU time of this process (time.process_time), so other load on
the machine slows the run but hardly moves the figures.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

import h11

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.output import header, line  # noqa: E402
from engine.targets.http_framing import parse_answer  # noqa: E402

ANSWER = (b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Type: text/plain\r\n"
          b"Date: Sat, 28 Nov 2026 12:00:00 GMT\r\n\r\nok")
REQUEST = h11.Request(method="POST", target="/hook",
                      headers=[("Host", "127.0.0.1:8080"), ("Content-Length", "10")])
BODY = b"0123456789"


def by_hand() -> None:
    parse_answer(ANSWER, 65536)


def _cycle(conn: h11.Connection) -> None:
    """What h11 needs to read an answer: the request told to it, the answer's three events."""
    conn.send(REQUEST)
    conn.send(h11.Data(data=BODY))
    conn.send(h11.EndOfMessage())
    conn.receive_data(ANSWER)
    for _ in range(3):  # Response, Data, EndOfMessage
        conn.next_event()


def h11_new_per_answer() -> None:
    _cycle(h11.Connection(h11.CLIENT))


_KEPT = h11.Connection(h11.CLIENT)


def h11_kept_per_connection() -> None:
    _cycle(_KEPT)
    _KEPT.start_next_cycle()


def microseconds_each(parse: Callable[[], None], answers: int) -> float:
    started = time.process_time()
    for _ in range(answers):
        parse()
    return (time.process_time() - started) / answers * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--answers", type=int, default=20000)
    args = parser.parse_args()
    header("bench/answer_parsing.py")
    ways = (by_hand, h11_new_per_answer, h11_kept_per_connection)
    figures: dict[str, list[float]] = {way.__name__: [] for way in ways}
    for _ in range(2):  # alternating, so a change of the machine's speed shows in both
        for way in ways:
            figures[way.__name__].append(microseconds_each(way, args.answers))
    for name, runs in figures.items():
        line(f"CPU per answer, {name.replace('_', ' ')}", " and ".join(f"{run:.1f} µs" for run in runs))


if __name__ == "__main__":
    main()
