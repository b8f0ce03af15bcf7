"""`python main.py serve`: the embedded scheduler, API and UI in one process."""

from __future__ import annotations

import ipaddress
import signal
from dataclasses import replace


def add_serve(subparsers) -> None:
    parser = subparsers.add_parser(
        "serve",
        help="run the scheduler, API and UI in one process",
        description="Run the embedded scheduler (SQLite store and queue), its API and UI.",
    )
    parser.add_argument("--host", default=None, help="address to listen on (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=None, help="port to listen on (default 8080)")
    parser.add_argument("--configs", default=None, metavar="DIR", help="project config directory (SUNDIAL_CONFIG_DIR)")
    parser.add_argument("--db", default=None, metavar="PATH", help="SQLite database file (SUNDIAL_DB)")
    parser.add_argument("--processes", type=int, default=None, metavar="N",
                        help="embedded backend: deliver from N processes on the database, "
                             "N - 1 of them dispatchers only (SUNDIAL_PROCESSES; default 1)")
    parser.set_defaults(run=run_serve)


def _settings(args):
    from config.settings import from_environment

    settings = from_environment()
    overrides = {
        "host": args.host, "port": args.port, "config_dir": args.configs, "db_path": args.db,
        "processes": args.processes,
    }
    settings = replace(settings, **{k: v for k, v in overrides.items() if v is not None})
    return _loopback_unless_tokens(settings)


def _loopback_unless_tokens(settings):
    """CONTRACT section 6: with no API tokens, only this machine may talk to us. The
    decision is the parsed tokens', never the raw value's: `,` holds no token, and is
    an error rather than an open server."""
    from web.identity import parse_api_tokens

    try:
        tokens = parse_api_tokens(settings.api_tokens)
    except ValueError as error:
        raise SystemExit(f"sundial: {error}") from None
    if tokens or settings.on_app_engine:
        return settings
    try:
        loopback = ipaddress.ip_address(settings.host).is_loopback
    except ValueError:
        loopback = settings.host == "localhost"
    if not loopback:
        # stdout: stderr carries only JSON log lines (CONTRACT 7b)
        print(f"sundial: no SUNDIAL_API_TOKENS set: listening on 127.0.0.1 instead of {settings.host}", flush=True)
        settings = replace(settings, host="127.0.0.1")
    return settings


def listener_options() -> dict:
    """waitress's settings for a listener that may face the network. Its defaults (100
    connections, 120 s of silence before a connection is dropped, bodies of up to 1 GiB
    spooled to disk) let one client with 100 idle sockets stop the server, and read a
    huge body before the app can refuse it. The connection limit stays within the
    process's file descriptors, raised to the hard limit where it allows."""
    from config.limits import MAX_REQUEST_BYTES

    return {
        "threads": 16,
        "ident": "sundial",
        "connection_limit": min(MAX_CONNECTIONS, _file_descriptors() - 100),
        "channel_timeout": CHANNEL_TIMEOUT_SECONDS,
        "cleanup_interval": 10,
        "max_request_body_size": MAX_REQUEST_BYTES,  # refused (413) before it is read
    }


MAX_CONNECTIONS = 1000
CHANNEL_TIMEOUT_SECONDS = 30  # a connection silent this long is closed


def _file_descriptors() -> int:
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = MAX_CONNECTIONS + 400  # the connections, the database, the sender's pool
    if soft != resource.RLIM_INFINITY and soft < wanted and (hard == resource.RLIM_INFINITY or hard > soft):
        new = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (new, hard))
        soft = new
    return MAX_CONNECTIONS + 100 if soft == resource.RLIM_INFINITY else soft


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def run_serve(args) -> int:
    from waitress import create_server

    from app.bootstrap import build
    from engine.logs import configure_logging

    settings = _settings(args)
    configure_logging()
    runtime = build(settings, children=True)
    server = create_server(runtime.app, host=settings.host, port=settings.port, **listener_options())
    print(f"sundial: serving on http://{settings.host}:{settings.port} "
          f"(database {settings.db_path}, configs {settings.config_dir}); "
          "no API tokens set, so every caller on this machine is an owner"
          if not settings.api_tokens else
          f"sundial: serving on http://{settings.host}:{settings.port}", flush=True)
    signal.signal(signal.SIGTERM, _interrupt)  # stop on SIGTERM exactly as on Ctrl-C
    runtime.start()
    try:
        server.run()
    except KeyboardInterrupt:
        pass
    finally:
        print("sundial: stopping", flush=True)
        server.close()
        runtime.stop()
    return 0
