"""`python main.py queues`: create the Cloud Tasks queues Sundial uses, or bring existing
ones to the settings Sundial expects. Safe to run again and again (run it on every
deploy).

That is the chain's queues (SUNDIAL_TASKS_QUEUE, and with SUNDIAL_TASKS_QUEUE_SHARDS = N
its shards `{queue}-1` .. `{queue}-(N-1)`, statemachine/shards.py) and one queue per throttle of the
project files in --configs (SUNDIAL_CONFIG_DIR), with `max_concurrent_dispatches` set to
the throttle's `max_in_flight`; its id is `{chain queue}-t-{project}-{throttle}-{hash}`
(engine.adapters.cloud.cloud_tasks_queue.throttle_queue_id). A file that does not
validate is reported and its throttles left as they are. The composition root picks
the Cloud Tasks adapter (app.bootstrap); this module only reads the command line and
the environment and prints what happened.
"""

from __future__ import annotations

import argparse
import sys
from typing import Mapping

from cli.common import Subparsers, UsageError
from config.settings import variable
from statemachine.shards import MAX_SHARDS

DEFAULT_LOCATION = "us-central1"
DEFAULT_QUEUE = "sundial"

_EPILOG = f"""\
Prints one line per queue: its path and what was done. Exit status 1 when Cloud
Tasks refuses (the caller needs roles/cloudtasks.queueAdmin), 2 for a bad argument.

Environment (each flag wins over its variable):
  GOOGLE_CLOUD_PROJECT         the Google Cloud project (--project)
  SUNDIAL_TASKS_LOCATION       the queues' location, your App Engine region
                               (--location, default {DEFAULT_LOCATION})
  SUNDIAL_TASKS_QUEUE          the chain's queue id (--queue, default {DEFAULT_QUEUE})
  SUNDIAL_TASKS_QUEUE_SHARDS   how many queues carry the chain (--shards, default 1):
                               QUEUE, QUEUE-1 .. QUEUE-(N-1); see docs/SCALE.md
  SUNDIAL_CONFIG_DIR           the project files whose throttles get queues (--configs)
  SUNDIAL_TASKS_EMULATOR_HOST  host:port of a Cloud Tasks emulator, reached without TLS
  GOOGLE_APPLICATION_CREDENTIALS
                               a service account key, where Application Default
                               Credentials are not set up otherwise

Examples:
  main.py queues --project my-project --location europe-west1 --configs configs/
  main.py queues --project my-project --shards 64
  SUNDIAL_TASKS_EMULATOR_HOST=127.0.0.1:8123 main.py queues --project dev
"""


def add_queues(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "queues",
        help="create or update the Cloud Tasks queues (idempotent)",
        description="Create the Cloud Tasks queues Sundial needs (the chain's queues and one per\n"
                    "throttle of the project files), or bring existing ones to its settings. Safe\n"
                    "to run on every deploy. Uses Application Default Credentials, or the emulator\n"
                    "at SUNDIAL_TASKS_EMULATOR_HOST.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--project", default=None, help="Google Cloud project (GOOGLE_CLOUD_PROJECT)")
    parser.add_argument("--location", default=None,
                        help=f"Cloud Tasks location, your App Engine region (SUNDIAL_TASKS_LOCATION, "
                             f"default {DEFAULT_LOCATION})")
    parser.add_argument("--queue", default=None,
                        help=f"the chain's queue id (SUNDIAL_TASKS_QUEUE, default {DEFAULT_QUEUE})")
    parser.add_argument("--shards", default=None,
                        help="how many queues carry the chain (SUNDIAL_TASKS_QUEUE_SHARDS, default 1); "
                             "the server must run with the same number")
    parser.add_argument("--configs", default=None,
                        help="the project config directory whose throttles get queues "
                             "(SUNDIAL_CONFIG_DIR, default examples/configs)")
    parser.set_defaults(run=run_queues)


def queue_settings(args: argparse.Namespace, env: Mapping[str, str] | None = None) -> tuple[str, str, str, str | None]:
    """(project, location, queue id, emulator host) from the flags, else the environment."""
    project = args.project or variable("GOOGLE_CLOUD_PROJECT", env)
    if not project:
        raise UsageError("--project: no Google Cloud project; pass --project or set GOOGLE_CLOUD_PROJECT")
    location = args.location or variable("SUNDIAL_TASKS_LOCATION", env) or DEFAULT_LOCATION
    queue = args.queue or variable("SUNDIAL_TASKS_QUEUE", env) or DEFAULT_QUEUE
    return project, location, queue, variable("SUNDIAL_TASKS_EMULATOR_HOST", env) or None


def run_queues(args: argparse.Namespace) -> int:
    project, location, queue, emulator = queue_settings(args)
    from app.cloud_libraries import require_cloud_libraries

    require_cloud_libraries("`sundial queues`")  # a one-line error, not a traceback, without [gcp]
    from google.api_core import exceptions as gexc
    from google.auth import exceptions as auth_exceptions

    from app.cloud_queues import provision_task_queues

    shards = queue_shard_count(args)
    throttles = config_throttles(args.configs or variable("SUNDIAL_CONFIG_DIR") or "examples/configs")
    try:
        results = provision_task_queues(project, location, queue, emulator, throttles, shards)
    except (gexc.GoogleAPICallError, gexc.RetryError, auth_exceptions.GoogleAuthError) as error:
        print(f"main.py queues: {_describe(error)}", file=sys.stderr)
        return 1
    for path, what in results:
        print(f"{path}: {what}")
    return 0


def queue_shard_count(args: argparse.Namespace, env: Mapping[str, str] | None = None) -> int:
    """--shards, else SUNDIAL_TASKS_QUEUE_SHARDS, else 1."""
    raw = args.shards or variable("SUNDIAL_TASKS_QUEUE_SHARDS", env) or "1"
    if not raw.isdigit() or not 1 <= int(raw) <= MAX_SHARDS:
        raise UsageError(f"--shards: expected 1 to {MAX_SHARDS} queues, got {raw!r}")
    return int(raw)


def config_throttles(directory: str) -> dict[str, int]:
    """"PROJECT/THROTTLE" -> max_in_flight for every valid project file in `directory`."""
    from pathlib import Path

    from config.loader import ProjectConfigError, parse_project_text

    throttles: dict[str, int] = {}
    for path in sorted(Path(directory).glob("*.yaml")):
        try:
            config = parse_project_text(path.stem, path.read_text(encoding="utf-8"), str(path), backend="cloud")
        except (ProjectConfigError, OSError) as error:
            print(f"main.py queues: {path}: skipped, its throttles unchanged: {error}", file=sys.stderr)
            continue
        throttles.update({f"{path.stem}/{name}": limit for name, limit in config.throttles.items()})
    return throttles


def _describe(error: Exception) -> str:
    code = getattr(error, "grpc_status_code", None)
    text = " ".join(str(getattr(error, "message", "") or error).split())
    if code is not None and code.name == "PERMISSION_DENIED":
        text += " (the caller needs roles/cloudtasks.queueAdmin; see docs/DEPLOY.md)"
    return f"{code.name}: {text}" if code is not None else text
