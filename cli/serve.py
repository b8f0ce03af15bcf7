"""`python main.py serve`: the embedded scheduler, API and UI in one process."""

from __future__ import annotations

import argparse
import ipaddress
import signal
from dataclasses import replace
from types import FrameType
from typing import TYPE_CHECKING, Any, Callable, NoReturn

from waitress.wasyncore import ExitNow

from cli.common import Subparsers

if TYPE_CHECKING:  # imported where used: `--help` stays quick
    from app.bootstrap import Runtime
    from config.settings import Settings

_DESCRIPTION = """\
Run the scheduler, its REST API (/api/v1), web UI (/), /metrics, /healthz and /readyz in one
process: on the embedded backend with a SQLite database and queue, or with
SUNDIAL_BACKEND=cloud on Cloud Datastore and Cloud Tasks. Project files in --configs
are imported at start and re-read every SUNDIAL_IMPORT_PERIOD."""

_EPILOG = """\
Who may connect: with no identity configured (SUNDIAL_API_TOKENS, SUNDIAL_IAP_AUDIENCE,
SUNDIAL_ID_TOKEN_AUDIENCE all unset, and not on App Engine), every caller is an owner of
every project, so serve listens on loopback only: a --host that is not a loopback
address (0.0.0.0, a LAN address) is replaced by 127.0.0.1, which it says, or with
--require-identity (what a container wants) it refuses to start; requests naming a
non-loopback Host are refused. Set SUNDIAL_API_TOKENS (TOKEN=user:EMAIL pairs,
comma-separated) to listen anywhere; callers then present `Authorization: Bearer
TOKEN`, and project ACLs decide what each member may do.

Output: a start-up banner for people on stdout; logs on stderr, one JSON object per
line with Cloud Logging's `severity`, `message` and `time` (see docs/ALERTS.md).

Stopping: SIGTERM or Ctrl-C stops every process of serve within SUNDIAL_STOP_GRACE (8s).
Nothing new is sent after the signal; a request on the wire that has no answer a second
before the end is sent again, under its invocation id, after the next start (so is an
occurrence staged ahead that had not left yet). Keep the grace below the platform's kill
timeout: docker stop waits 10 s (-t), Kubernetes terminationGracePeriodSeconds (30 s).

Environment (flags win over their variables):
  where it runs
    SUNDIAL_BACKEND                local (default) or cloud
    SUNDIAL_LOG_LEVEL              DEBUG, INFO (default), WARNING or ERROR
    SUNDIAL_CONFIG_DIR             project files (--configs, default examples/configs)
    SUNDIAL_DB                     SQLite database (--db, default .sundial/sundial.db)
    SUNDIAL_PORT                   port to listen on (--port, default 8080)
    SUNDIAL_PROCESSES              embedded: processes delivering (--processes, default 1)
    SUNDIAL_WORKERS                embedded: dispatcher threads (default 32)
    SUNDIAL_STAGE_AHEAD            embedded: commit an occurrence this long before its time (10s; 0s: off)
  who may call
    SUNDIAL_API_TOKENS             TOKEN=user:EMAIL,...; unset: loopback only, everyone an owner
    SUNDIAL_ADMINS                 members who own every project (user:EMAIL,...)
    SUNDIAL_GROUPS_FILE            YAML {group: [members]} for project ACLs
    SUNDIAL_IAP_AUDIENCE           behind Identity-Aware Proxy: its assertions' audience
    SUNDIAL_ID_TOKEN_AUDIENCE      audience of Google ID tokens accepted as callers
    SUNDIAL_IAP_CERTS_URL, SUNDIAL_ID_CERTS_URL
                                   where those tokens' signing keys are fetched
  the chain and its timing
    SUNDIAL_TASK_SECRET            secret on every task (default: generated, kept in the database)
    SUNDIAL_IMPORT_PERIOD, SUNDIAL_WATCHDOG_PERIOD, SUNDIAL_CLEANUP_PERIOD
                                   how often configs, the watchdog, the clean-up run (5s, 30s, 1h)
    SUNDIAL_MAINTENANCE_BUDGET     time one watchdog or clean-up run may work (40s)
    SUNDIAL_WATCHDOG_WORKERS       repairs at once (8 on cloud, 1 embedded)
    SUNDIAL_HISTORY_DAYS           invocation history kept, in days (45)
    SUNDIAL_TASK_LEASE             how long a taken task is its taker's (30s)
    SUNDIAL_HEARTBEAT_PERIOD, SUNDIAL_HEARTBEAT_TIMEOUT
                                   embedded: liveness of each process (5s, 4 periods)
    SUNDIAL_STOP_GRACE             SIGTERM or Ctrl-C to exit, at most (8s): nothing new is sent
                                   after the signal; requests still out a second before the end
                                   are sent again under their invocation ids after the next start
    SUNDIAL_TICK_GRACE, SUNDIAL_START_GRACE, SUNDIAL_LATE_TOLERANCE
                                   the chain's timings (30s, 60s, 60s)
  Google Cloud (cloud backend)
    GOOGLE_CLOUD_PROJECT           project of Datastore and Cloud Tasks; names log traces
    SUNDIAL_TASKS_LOCATION, SUNDIAL_TASKS_QUEUE
                                   the chain's queue (us-central1, sundial)
    SUNDIAL_TASKS_QUEUE_SHARDS     queues the chain is spread over (1; docs/SCALE.md)
    SUNDIAL_SERVICE_URL            where Cloud Tasks calls back (default http://HOST:PORT)
    SUNDIAL_TASKS_TARGET           appengine or http: the form of the chain's tasks
    SUNDIAL_TASKS_SERVICE_ACCOUNT  account of the OIDC tokens tasks carry and handlers accept
    SUNDIAL_TASKS_EMULATOR_HOST    host:port of a Cloud Tasks emulator (no TLS)
    DATASTORE_EMULATOR_HOST, PUBSUB_EMULATOR_HOST
                                   Google's emulator variables
    GAE_APPLICATION, GAE_SERVICE   set by App Engine
    GOOGLE_APPLICATION_CREDENTIALS, CLOUDSDK_CONFIG, HOME
                                   where Application Default Credentials are found
  target identity (auth: on targets)
    SUNDIAL_IDENTITIES             PROJECT=SA,SA;PROJECT=SA: the service accounts each project may name
    SUNDIAL_IDENTITY_AUDIENCES     PROJECT=URL,URL;...: OIDC audiences beyond the target URL's origin
    SUNDIAL_OWN_HOSTS, K_SERVICE   Sundial's other host names and its Cloud Run service (never a target)
    GCE_METADATA_HOST              host:port of the metadata server (google-auth's variable)
    SUNDIAL_IAM_CREDENTIALS_URL    IAM Credentials API, for accounts other than the runtime's
  secrets
    SUNDIAL_SECRETS_DIR            one machine: <dir>/<project>/<NAME> files
    SUNDIAL_SECRETS                `local`: SUNDIAL_SECRETS_DIR on the cloud backend too
    SUNDIAL_SECRET_MANAGER_URL     Secret Manager's API (for tests)
  testing only
    SUNDIAL_FAULT_DUPLICATE_TASKS  1: create every Cloud Tasks task twice

Examples:
  main.py serve                                    http://127.0.0.1:8080, examples/configs
  main.py serve --port 9000 --configs configs/ --db /var/lib/sundial/s.db
  SUNDIAL_API_TOKENS="$(openssl rand -hex 16)=user:ops@example.com" \\
    SUNDIAL_ADMINS=user:ops@example.com main.py serve --host 0.0.0.0
"""


def add_serve(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "serve",
        help="run the scheduler, API and UI in one process",
        description=_DESCRIPTION,
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--host", default=None,
                        help="address to listen on (default 127.0.0.1; loopback only without SUNDIAL_API_TOKENS)")
    parser.add_argument("--port", type=int, default=None, help="port to listen on (SUNDIAL_PORT, default 8080)")
    parser.add_argument("--configs", default=None, metavar="DIR", help="project config directory (SUNDIAL_CONFIG_DIR)")
    parser.add_argument("--db", default=None, metavar="PATH", help="SQLite database file (SUNDIAL_DB)")
    parser.add_argument("--processes", type=int, default=None, metavar="N",
                        help="embedded backend: deliver from N processes on the database, "
                             "N - 1 of them dispatchers only (SUNDIAL_PROCESSES; default 1)")
    parser.add_argument("--require-identity", action="store_true",
                        help="refuse to start, instead of listening on 127.0.0.1, when --host is not a "
                             "loopback address and no identity is configured (SUNDIAL_API_TOKENS, "
                             "SUNDIAL_IAP_AUDIENCE, SUNDIAL_ID_TOKEN_AUDIENCE): what a container wants")
    parser.set_defaults(run=run_serve)


def _settings(args: argparse.Namespace) -> Settings:
    from config.settings import from_environment

    settings = from_environment()
    overrides = {
        "host": args.host, "port": args.port, "config_dir": args.configs, "db_path": args.db,
        "processes": args.processes,
    }
    settings = replace(settings, **{k: v for k, v in overrides.items() if v is not None})
    return _loopback_unless_tokens(settings, args.require_identity)


def _loopback_unless_tokens(settings: Settings, require_identity: bool = False) -> Settings:
    """docs/REFERENCE.md section 6: with no way to tell callers apart, only this machine may talk
    to us. The decision is the parsed tokens', never the raw value's: `,` holds no
    token, and is an error rather than an open server. A non-loopback address asked
    for without one is narrowed to 127.0.0.1 (and said so), or with `require_identity`
    refused: in a container, a server on 127.0.0.1 would look healthy from inside and
    answer no one outside."""
    if identity_configured(settings):
        return settings
    try:
        loopback = ipaddress.ip_address(settings.host).is_loopback
    except ValueError:
        loopback = settings.host == "localhost"
    if not loopback and require_identity:
        raise SystemExit(
            f"sundial: refusing to listen on {settings.host}: with no SUNDIAL_API_TOKENS (nor "
            "SUNDIAL_IAP_AUDIENCE or SUNDIAL_ID_TOKEN_AUDIENCE), every caller would be an owner. "
            "Set tokens (TOKEN=user:EMAIL,...) or leave out --host")
    if not loopback:
        # stdout: stderr carries only JSON log lines
        print(f"sundial: no SUNDIAL_API_TOKENS set: listening on 127.0.0.1 instead of {settings.host}", flush=True)
        settings = replace(settings, host="127.0.0.1")
    return settings


def identity_configured(settings: Settings) -> bool:
    """Whether callers must prove who they are: API tokens, App Engine, or Google's
    signed identities (IAP assertions, ID tokens); web.identity's open mode otherwise."""
    from web.identity import parse_api_tokens

    try:
        tokens = parse_api_tokens(settings.api_tokens)
    except ValueError as error:
        raise SystemExit(f"sundial: {error}") from None
    return bool(tokens or settings.on_app_engine or settings.iap_audience or settings.id_token_audience)


class _StopSignal(ExitNow):  # type: ignore[misc]  # waitress has no type information
    """SIGTERM or SIGINT, raised in the main thread (waitress's loop) by `_stop_on`'s handler.
    Not KeyboardInterrupt: waitress catches that and waits up to 5 s for the requests it is
    serving, outside the stop's grace. An ExitNow, which waitress's loop lets through: the
    signal may come while that loop runs a connection's handler, whose bare `except:`
    swallowed any other exception, and the process went on serving until killed (a third
    of the stops right after a request: tests/e2e/test_stop_signal.py)."""


def _stop_on(runtime: Runtime) -> Callable[[int, FrameType | None], None]:
    def handle(signum: int, frame: FrameType | None) -> NoReturn:
        runtime.begin_stop()  # nothing new is sent from this instant (it takes no lock)
        for again in (signal.SIGINT, signal.SIGTERM):
            signal.signal(again, _already_stopping)
        raise _StopSignal(signal.Signals(signum).name)
    return handle


def _already_stopping(signum: int, frame: FrameType | None) -> None:
    """A second Ctrl-C or SIGTERM while stopping: the stop is bounded by its grace already,
    and an exception in the middle of it would skip its last commits."""


def run_serve(args: argparse.Namespace) -> int:
    from app.bootstrap import build
    from app.listener import Application, check_database_path, open_listener
    from app.stopping import exit_now_if_held
    from engine.collector import settle_collector
    from engine.logs import log_everything_as_json

    settings = _settings(args)
    log_everything_as_json(settings.log_level)  # before build: the Google libraries warn as they are imported
    # Before anything is built: a taken port or an unusable database path is one line,
    # not a traceback after the database was created.
    application = Application()
    server = open_listener(settings.host, settings.port, application)
    if settings.backend == "local":
        check_database_path(settings.db_path)
    runtime = build(settings, children=True)
    assert runtime.app is not None, "a server's runtime has its web app"
    application.app = runtime.app
    settle_collector()
    print(f"sundial: serving on http://{settings.host}:{settings.port} "
          f"(database {settings.db_path}, configs {settings.config_dir}); "
          "no API tokens set, so every caller on this machine is an owner"
          if not identity_configured(settings) else
          f"sundial: serving on http://{settings.host}:{settings.port}", flush=True)  # stdout: stderr is JSON only
    runtime.start()
    for signum in (signal.SIGINT, signal.SIGTERM):  # stop on SIGTERM exactly as on Ctrl-C
        signal.signal(signum, _stop_on(runtime))
    try:
        server.run()
    except (_StopSignal, KeyboardInterrupt):
        pass
    finally:
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, _already_stopping)
        grace = settings.stop_grace.total_seconds()
        print(f"sundial: stopping (within {grace:g} s: nothing new is sent; what is on the wire is "
              "sent again under its invocation id after the next start if it has no answer by then)", flush=True)
        server.close()
        runtime.stop()  # within settings.stop_grace (app/stopping.py)
        if runtime.stop_times is not None:
            _finish_requests(server, runtime.stop_times.answers_by)
    exit_now_if_held()
    return 0


def _finish_requests(server: Any, until: float) -> None:
    """The requests being served (the API's, Cloud Tasks' on the cloud backend, which
    would otherwise be run again elsewhere) get until `until` to finish; the listener is
    closed already. waitress's threads are daemons: one still busy then ends with us.
    `server`: waitress's create_server's (Any: waitress has no type information)."""
    import time

    # (At least a moment: its idle threads take one to leave, and it warns of those still there.)
    server.task_dispatcher.shutdown(cancel_pending=True, timeout=max(until - time.monotonic(), 0.1))
