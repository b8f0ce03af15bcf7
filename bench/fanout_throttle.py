"""Fan-out under a throttle: one occurrence of `--count` events spread over `--spread`
seconds, delivered to a receiver that answers each request after `--delay-ms`, through
a throttle of `--limit` (max_in_flight). Prints the deliveries per second and the most
requests the receiver saw in flight at once (it must never exceed the limit).

    .venv/bin/python bench/fanout_throttle.py [--count 10000] [--spread 10] [--limit 50]
                                              [--delay-ms 100] [--workers 64]

With the defaults the throttle binds: 10,000 events in 10 s ask for 1,000/s, and 50
requests in flight at 100 ms each allow at most 500/s; so the figure to compare is the
delivery rate against that 500/s ceiling, and the concurrency against 50.

It also prints the largest job record the server's database held during the run
(sampled every 2 s, tests/support/records.py) and exits 1 when that is over
MAX_JOB_RECORD_BYTES (16 KiB).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.output import PROJECT, header, line, note, percentile  # noqa: E402
from bench.receiver import FastReceiver  # noqa: E402
from bench.server_process import ServerProcess, report_records, watch_records  # noqa: E402

CONFIG = """
throttles:
  consumers: {{max_in_flight: {limit}}}
jobs:
  - id: fanout
    at: ["{start}"]
    timeout: 1h
    fanout: {{count: {count}, spread: {spread}s}}
    throttle: consumers
    target: {{http: {{url: "{url}/slow?ms={delay_ms}"}}}}
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=10_000)
    parser.add_argument("--spread", type=float, default=10.0)
    parser.add_argument("--limit", type=int, default=50)
    parser.add_argument("--delay-ms", type=int, default=100)
    parser.add_argument("--workers", type=int, default=64, help="SUNDIAL_WORKERS of the server")
    parser.add_argument("--lead", type=float, default=6.0, help="seconds from start to the occurrence")
    parser.add_argument("--profile", type=Path, help="record py-spy profiles of the server into this directory")
    args = parser.parse_args()

    header("bench/fanout_throttle.py")
    receiver = FastReceiver()
    with tempfile.TemporaryDirectory(prefix="sundial-fanout-") as workdir:
        server = ServerProcess(Path(workdir), {"SUNDIAL_WORKERS": str(args.workers)})
        server.configs.mkdir()
        start = datetime.now(timezone.utc).replace(microsecond=0) + timedelta(seconds=args.lead)
        (server.configs / f"{PROJECT}.yaml").write_text(CONFIG.format(
            limit=args.limit, start=start.isoformat().replace("+00:00", "Z"), count=args.count,
            spread=args.spread, url=receiver.url, delay_ms=args.delay_ms))
        server.start()
        records = None
        try:
            server.wait_ready()
            if args.profile:
                args.profile.mkdir(parents=True, exist_ok=True)
                server.start_profile(args.profile / "fanout", args.lead + args.spread + 15)
            records = watch_records(server)
            note(f"waiting for {args.count:,} deliveries")
            finished = _wait_for(receiver, args.count, start.timestamp() + args.spread + 600)
            cpu = server.cpu_seconds()
            records.stop()  # with a last sample: the record as the run left it
        finally:
            if records is not None:
                records.close()
            server.stop()
            receiver.close()
    _report(args, receiver, start.timestamp(), finished, cpu)
    # The bound on stored state: a job record over MAX_JOB_RECORD_BYTES fails the bench (after every figure is out).
    return 0 if report_records("fan-out:", records)["record_within_bound"] else 1


def _wait_for(receiver: FastReceiver, count: int, deadline: float) -> float:
    while receiver.count() < count and time.time() < deadline:
        time.sleep(0.05)
    return time.time()


def _report(args, receiver: FastReceiver, start: float, finished: float, cpu: float) -> None:
    arrivals = receiver.arrivals()
    if not arrivals:
        line("deliveries", "none arrived")
        return
    first, last = min(a.at for a in arrivals), max(a.at for a in arrivals)
    peak = receiver.max_concurrency().get(f"{PROJECT}/fanout", 0)
    ceiling = args.limit / (args.delay_ms / 1000) if args.delay_ms else float("inf")
    line("fan-out", f"{args.count:,} events over {args.spread:g} s, throttle max_in_flight {args.limit}, "
                    f"target answers in {args.delay_ms} ms")
    line("delivered", f"{len(arrivals):,} of {args.count:,} (attempts > 1: "
                      f"{sum(a.attempt not in ('1', '') for a in arrivals):,})")
    line("deliveries per second (first to last)", f"{len(arrivals) / max(last - first, 1e-9):,.0f}/s "
                                                   f"(throttle ceiling {ceiling:,.0f}/s)")
    line("last delivery after the scheduled time", f"{last - start:.1f} s (spread {args.spread:g} s)")
    line("max requests in flight (receiver)", f"{peak} (limit {args.limit})")
    per_second = {}
    for arrival in arrivals:
        second = int(arrival.at - first)
        per_second[second] = per_second.get(second, 0) + 1
    rates = sorted(per_second.values())
    line("per-second deliveries p10 / p50 / max", f"{percentile(rates, 0.1)} / {percentile(rates, 0.5)} / {rates[-1]}")
    line("server CPU seconds", f"{cpu:.1f}")


if __name__ == "__main__":
    raise SystemExit(main())
