"""The floor under the aligned steady figure: N requests due at one instant, with nothing
left to do at that instant but send them.

    .venv/bin/python bench/send_floor.py [--jobs 1000] [--processes 1 2] [--threads 16 32] [--writer]

Each sender process warms one keep-alive connection per thread (Sundial's own
`engine/targets/http_pool.py`), waits for T, then sends its share of the N requests
from its threads; the asyncio receiver of bench/server.py records arrivals. Lateness is
arrival - T. No storage, no rendering, no state machine: whatever a scheduler does
before T, the sends of 1,000 occurrences due at once cannot arrive sooner than this on
the machine it runs on.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.output import header, line, percentile  # noqa: E402
from bench.receiver import FastReceiver  # noqa: E402

SENDER = r"""
import sys, threading, time
sys.path.insert(0, sys.argv[5])
from engine.targets.http_pool import ConnectionPool, parse_endpoint

url, count, threads, at = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
pool, endpoint = ConnectionPool(), parse_endpoint(url)
headers = {"Content-Type": "application/json", "X-Sundial-Job": "floor"}

def send(name):
    pool.request(endpoint, "POST", dict(headers, **{"X-Sundial-Invocation": name}), b"{}", 10, 65536)

def run(names):
    for name in names:
        send(name)

warm = [threading.Thread(target=send, args=("warm",)) for _ in range(threads)]
for thread in warm: thread.start()
for thread in warm: thread.join()
shares = [[f"{i}" for i in range(k, count, threads)] for k in range(threads)]
senders = [threading.Thread(target=run, args=(share,)) for share in shares]
time.sleep(max(0.0, at - time.time()))
for thread in senders: thread.start()
for thread in senders: thread.join()
"""


# The same through the batch writer of staged requests (engine/targets/http_batch.py): every
# request encoded ahead, `threads` connections per host opened ahead, one thread at T.
WRITER = r"""
import sys, threading, time
sys.path.insert(0, sys.argv[5])
from engine.targets.http_batch import BatchWriter, Outgoing
from engine.targets.http_pool import ConnectionPool, encode_request, parse_endpoint

url, count, parallel, at = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
pool, endpoint = ConnectionPool(max_idle_per_host=parallel), parse_endpoint(url)
key = pool.key_of(endpoint, None, "floor")
headers = {"Content-Type": "application/json", "X-Sundial-Job": "floor"}
writer = BatchWriter(pool, parallel=parallel)
writer.start()
left, done = [count], threading.Event()
def finished(outcome):
    left[0] -= 1
    if not left[0]:
        done.set()
items = [Outgoing(key, encode_request(endpoint, "POST", dict(headers, **{"X-Sundial-Invocation": str(i)}), b"{}"),
                  "POST", 10, 65536, lambda: True, finished) for i in range(count)]
for _ in range(parallel):
    pool.warm(key, 10, parallel)
time.sleep(max(0.0, at - time.time()))
cpu = time.process_time()
writer.submit(items)
done.wait(30)
print(f"{time.process_time() - cpu:.3f}", file=sys.stderr)
writer.shutdown()
"""


def one_run(receiver: FastReceiver, jobs: int, processes: int, threads: int, writer: bool = False) -> list[float]:
    receiver.clear()
    at = time.time() + 1.5
    children = [
        subprocess.Popen([sys.executable, "-c", WRITER if writer else SENDER, receiver.url + "/floor",
                          str(jobs // processes), str(threads), str(at), str(ROOT)])
        for _ in range(processes)
    ]
    for child in children:
        child.wait()
    return sorted(a.at - at for a in receiver.arrivals() if a.at >= at - 0.5)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--processes", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--threads", type=int, nargs="+", default=[16, 32],
                        help="sender threads per process (with --writer: connections per process)")
    parser.add_argument("--writer", action="store_true",
                        help="send through the batch writer of staged requests (one thread, non-blocking)")
    args = parser.parse_args(argv)
    header("bench/send_floor.py")
    receiver = FastReceiver()
    try:
        for processes in args.processes:
            for threads in args.threads:
                late = one_run(receiver, args.jobs, processes, threads, args.writer)
                unit = "connections, one writer" if args.writer else "threads"
                line(f"{args.jobs:,} at once, {processes} process(es) x {threads} {unit}",
                     f"arrived {len(late):,}; lateness p50 {percentile(late, 0.5) * 1000:.0f} ms, "
                     f"p99 {percentile(late, 0.99) * 1000:.0f} ms, max {late[-1] * 1000:.0f} ms")
    finally:
        receiver.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
