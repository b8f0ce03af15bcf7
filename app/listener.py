"""The socket `serve` listens on: opened before anything else is built, sized for a
listener that may face the network, and answering its own refusals in the API's JSON.

Opening it first means a port that is taken is a one-line error before the database is
created or opened. waitress answers some requests itself, before the application sees
them (a body over the size limit, a malformed request line, a header block too large,
an application that raised): those answers are `{"error": {"code", "message"}}` too, as
every other answer of the server is, not waitress's plain text.
"""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path
from typing import Any, Callable, Iterable

from waitress.channel import HTTPChannel
from waitress.server import BaseWSGIServer, create_server
from waitress.task import ErrorTask

from config.limits import MAX_REQUEST_BYTES
from web.errors import TOO_LARGE, code_of_status

MAX_CONNECTIONS = 4000  # idle connections cost a few kilobytes each; a busy one a thread's turn
# Descriptors kept for everything but the callers' connections: the database and its
# log, the targets' pooled connections, a child's pipes.
RESERVED_DESCRIPTORS = 400
CHANNEL_TIMEOUT_SECONDS = 30  # a connection silent this long is closed


WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


class ListenerError(SystemExit):
    """A one-line reason `serve` cannot start, printed instead of a traceback."""


class Application:
    """The application a listener serves, given once it is built (`serve` opens the
    listener first); until then it answers 503, though nothing is served before `run`."""

    def __init__(self) -> None:
        self.app: WsgiApp = _not_ready

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        return self.app(environ, start_response)


def open_listener(host: str, port: int, application: Application) -> Any:
    """The bound, listening waitress server (one socket per address `host` names)."""
    sockets: dict[int, Any] = {}  # waitress's socket map: at this point, its listening servers
    try:
        server = create_server(application, map=sockets, host=host, port=port, **listener_options())
    except OSError as error:
        raise ListenerError(f"sundial: cannot listen on {host}:{port}: {_why(error)}") from None
    for each in sockets.values():
        if isinstance(each, BaseWSGIServer):
            each.channel_class = JsonErrorChannel
    return server


def check_database_path(path: str) -> None:
    """A one-line error, before anything is created, for a database that cannot be made or
    written there (a parent that is a file, a folder this user may not write)."""
    file = Path(path)
    if file.exists():
        if file.is_dir() or not os.access(file, os.R_OK | os.W_OK):
            raise ListenerError(f"sundial: cannot use the database {path}: "
                                f"{'it is a folder' if file.is_dir() else 'not readable and writable by this user'}")
        return
    folder = next(parent for parent in file.absolute().parents if parent.exists())
    if not folder.is_dir():
        raise ListenerError(f"sundial: cannot create the database {path}: {folder} is not a folder")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise ListenerError(f"sundial: cannot create the database {path}: {folder} is not writable by this user")


def _why(error: OSError) -> str:
    if error.errno == errno.EADDRINUSE:
        return "the address is in use (another server?); choose another with --port or SUNDIAL_PORT"
    if error.errno == errno.EADDRNOTAVAIL:
        return "no interface of this machine has that address (--host)"
    if error.errno == errno.EACCES:
        return "permission denied (ports below 1024 need privileges)"
    return error.strerror or str(error)


def _not_ready(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
    body = _json_error(503, "starting", "UNAVAILABLE")
    start_response("503 Service Unavailable", [("Content-Type", "application/json"),
                                               ("Content-Length", str(len(body)))])
    return [body]


def _json_error(status: int, message: str, code: str | None = None) -> bytes:
    """The API's error body (web/errors.py), its code from the status unless given."""
    code = code or code_of_status(status)
    return json.dumps({"error": {"code": code, "message": message}}).encode()


class JsonErrorTask(ErrorTask):  # type: ignore[misc]  # waitress has no type information
    """waitress's answer to a request it refused itself, in the API's JSON."""

    def execute(self) -> None:
        refusal = self.request.error
        message = TOO_LARGE if refusal.code == 413 else f"{refusal.reason.lower()}: {refusal.body}".rstrip(": ")
        body = _json_error(refusal.code, message)
        self.status = f"{refusal.code} {refusal.reason}"
        self.response_headers.append(("Content-Type", "application/json"))
        self.set_close_on_finish()
        self.content_length = len(body)
        self.write(body)


class JsonErrorChannel(HTTPChannel):  # type: ignore[misc]  # waitress has no type information
    error_task_class = JsonErrorTask


def listener_options() -> dict[str, Any]:
    """waitress's settings for a listener that may face the network. Its defaults (100
    connections, 120 s of silence before a connection is dropped, bodies of up to 1 GiB
    spooled to disk) let one client with 100 idle sockets stop the server, and read a
    huge body before the app can refuse it. Its default loop calls select(), which
    raises on a descriptor numbered 1024 or more and so ends the whole process once the
    connections and the descriptors the server holds anyway (the database, its log, the
    targets' pooled connections) pass 1023: poll() has no such ceiling. The connection
    limit stays within the process's file descriptors, raised to the hard limit."""
    return {
        "threads": 16,
        "ident": "sundial",
        "asyncore_use_poll": True,
        "connection_limit": connection_limit(file_descriptors()),
        "channel_timeout": CHANNEL_TIMEOUT_SECONDS,
        "cleanup_interval": 10,
        "max_request_body_size": MAX_REQUEST_BYTES,  # refused (413) before it is read
    }


def connection_limit(descriptors: int) -> int:
    return min(MAX_CONNECTIONS, max(descriptors // 2, descriptors - RESERVED_DESCRIPTORS))


def file_descriptors() -> int:
    """The open-file limit, its soft value raised to the hard one (and said so on stdout):
    a distribution's default of 1,024 is a limit on callers, not on the server."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = MAX_CONNECTIONS + RESERVED_DESCRIPTORS
    if soft == resource.RLIM_INFINITY:
        return wanted
    # An unlimited hard limit cannot be a soft one (the kernel caps it at nr_open).
    target = wanted if hard == resource.RLIM_INFINITY else hard
    if target > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        print(f"sundial: open-file limit raised from {soft} to {target} (the hard limit "
              f"{'is unlimited' if hard == resource.RLIM_INFINITY else 'allows it'})", flush=True)
        soft = target
    return soft
