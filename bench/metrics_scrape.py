"""What one scrape of /metrics costs with 10,000 jobs (one project at its job limit):
the per-job series read every job's record through engine/queries.py.

    .venv/bin/python bench/metrics_scrape.py [--jobs 10000] [--scrapes 20]

The jobs are imported into a fresh SQLite database through the import path `serve`
runs (bench/scale.py's files); the app is the real one (web/app.py), called through
Flask's test client, so the figure is the server's own work without the network.
Prints the time of a scrape that reads every record and of one within the TTL for
which the per-job series are reused (web/metrics.py), and the size of the text.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.output import header, line  # noqa: E402
from bench.scale import open_engine, write_configs  # noqa: E402


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--scrapes", type=int, default=20)
    args = parser.parse_args(argv)

    from app.importer import import_directory
    from config.settings import Settings
    from web.app import create_app

    header(f"bench/metrics_scrape.py --jobs {args.jobs} --scrapes {args.scrapes}")
    with tempfile.TemporaryDirectory() as scratch:
        configs = Path(scratch) / "configs"
        write_configs(configs, args.jobs, min(args.jobs, 10_000))
        store, engine = open_engine(Path(scratch) / "s.db")
        began = time.perf_counter()
        import_directory(engine.configs, configs)
        line("import", f"{time.perf_counter() - began:,.1f} s")
        client = create_app(engine, Settings(task_secret="bench", demo_echo=False)).test_client()
        walls, cpus, size = [], [], 0
        for _ in range(args.scrapes):
            wall, cpu = time.perf_counter(), time.process_time()
            answer = client.get("/metrics")
            walls.append(time.perf_counter() - wall)
            cpus.append(time.process_time() - cpu)
            size = len(answer.data)
            assert answer.status_code == 200
        # The first scrape reads every record; the next ones within JOB_SERIES_TTL reuse them.
        line("scrape reading every job: wall / CPU", f"{walls[0] * 1000:,.0f} / {cpus[0] * 1000:,.0f} ms")
        line("scrape within the TTL: wall / CPU, median",
             f"{statistics.median(walls[1:]) * 1000:,.0f} / {statistics.median(cpus[1:]) * 1000:,.0f} ms")
        line("per-job series", f"{answer.data.count(b'sundial_job_paused{'):,} jobs; text {size / 1024:,.0f} KiB")
        per_minute = cpus[0] + 3 * statistics.median(cpus[1:])  # a 15 s interval, a 60 s TTL
        line("share of one core, a scrape every 15 s", f"{per_minute / 60:.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
