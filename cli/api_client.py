"""A small client of the REST API (docs/REFERENCE.md section 5) for the operator's commands.

Standard library only (urllib.request): one request per call, JSON in and out. An
answer of 4xx/5xx becomes `ApiFailure` with the API's own code and message (web/errors.py
answers every error as `{"error": {"code", "message"}}`); a server that cannot be reached
becomes `Unreachable`, naming it. The commands print either as one line and exit 1.
"""

from __future__ import annotations

import json
import socket
import sys
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import IO, Any, Iterator, Mapping, Sequence

from cli.common import UsageError
from config.limits import MAX_BATCH_JOBS, MAX_REQUEST_BYTES
from config.settings import variable
from statemachine.safety import is_loopback_host

DEFAULT_SERVER = "http://127.0.0.1:8080"
TIMEOUT_SECONDS = 30.0
# A batch put's body is kept this far under the server's request limit (its `{"jobs": []}`
# and separators are counted, this is slack for nothing else).
BATCH_BYTES = MAX_REQUEST_BYTES - 1024


class ApiFailure(Exception):
    """The server answered with an error status."""

    def __init__(self, status: int, code: str, message: str):
        super().__init__(f"{status} {code}: {message}" if code else f"{status}: {message}")
        self.status, self.code, self.message = status, code, message


class Unreachable(Exception):
    """No usable answer: refused, unknown host, timed out, or an answer that is not JSON."""


def server_url(flag: str | None, env: Mapping[str, str] | None = None) -> str:
    """--server, else SUNDIAL_SERVER, else the default; an http(s) URL without a trailing /."""
    raw = (flag or variable("SUNDIAL_SERVER", env) or DEFAULT_SERVER).strip()
    parts = urllib.parse.urlsplit(raw)
    if parts.scheme not in ("http", "https") or not parts.netloc or parts.query or parts.fragment:
        where = "--server" if flag else "SUNDIAL_SERVER"
        raise UsageError(f"{where}: expected a URL such as http://127.0.0.1:8080, got {raw!r}")
    return raw.rstrip("/")


def bearer_token(flag: str | None, env: Mapping[str, str] | None = None, token_file: str | None = None,
                 stdin: IO[str] | None = None) -> str:
    """--token-file FILE (`-`: standard input), else --token (`-`: standard input), else
    SUNDIAL_TOKEN; "" for none (a server without SUNDIAL_API_TOKENS). A token on the
    command line itself is visible to every local user in the process list."""
    if token_file is not None and flag is not None:
        raise UsageError("--token and --token-file: give one of them")
    where = "--token-file" if token_file is not None else "--token"
    if token_file is not None or flag == "-":
        token = _read_token(token_file or "-", where, stdin or sys.stdin)
    else:
        token = (flag if flag is not None else variable("SUNDIAL_TOKEN", env)).strip()
    if token and not (token.isascii() and token.isprintable() and " " not in token):
        raise UsageError(f"{where}: a token is printable ASCII without spaces, on one line")
    return token


def _read_token(path: str, where: str, stdin: IO[str]) -> str:
    if path == "-":
        token = stdin.read().strip()
    else:
        try:
            token = Path(path).read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError) as error:
            raise UsageError(f"{where}: cannot read {path}: {getattr(error, 'strerror', None) or error}") from None
    if not token:
        raise UsageError(f"{where}: {'standard input' if path == '-' else path} holds no token")
    return token


def refuse_plain_http(server: str, token: str, insecure: bool) -> None:
    """A token goes over plain http:// only to this machine (a loopback host), unless
    --insecure: anywhere else anyone on the path reads it."""
    parts = urllib.parse.urlsplit(server)
    if not token or insecure or parts.scheme != "http" or is_loopback_host(parts.hostname or ""):
        return
    raise UsageError(f"refusing to send the token over plain http:// to {parts.hostname}, which is not "
                     "this machine: use https://, or --insecure to send it anyway")


def segment(value: str) -> str:
    """One path segment, quoted so that an id cannot change the path."""
    return urllib.parse.quote(value, safe="")


class ApiClient:
    def __init__(self, server: str, token: str = "", timeout: float = TIMEOUT_SECONDS):
        self.server, self.token, self.timeout = server, token, timeout

    def call(self, method: str, path: str, query: dict[str, Any] | None = None,
             body: dict[str, Any] | None = None, timeout: float | None = None) -> Any:
        """The decoded JSON answer of `method /api/v1{path}`; raises ApiFailure or Unreachable.
        `timeout`: seconds to wait for the answer, when not the client's own."""
        return self._send(method, path, query, body, timeout)[1]

    def _send(self, method: str, path: str, query: dict[str, Any] | None,
              body: dict[str, Any] | None, timeout: float | None = None) -> tuple[int, Any]:
        url = f"{self.server}/api/v1{path}"
        if query:
            # doseq: a list is the parameter repeated (`label=a:1&label=b`).
            url += "?" + urllib.parse.urlencode({k: v for k, v in query.items() if v is not None}, doseq=True)
        headers = {"Accept": "application/json"}
        data = None
        if body is not None:
            data, headers["Content-Type"] = json.dumps(body).encode(), "application/json"
        request = urllib.request.Request(url, data=data, method=method, headers=headers)
        if self.token:
            # Unredirected: a redirect (to another host, say) does not carry the token on.
            request.add_unredirected_header("Authorization", f"Bearer {self.token}")
        try:
            with urllib.request.urlopen(request, timeout=timeout or self.timeout) as response:
                status, raw = response.status, response.read()
        except urllib.error.HTTPError as error:
            raise _failure(error.code, error.read()) from None
        except (urllib.error.URLError, OSError) as error:
            raise Unreachable(f"cannot reach the Sundial server at {self.server}: {_why(error)}") from None
        try:
            return status, json.loads(raw) if raw else None
        except ValueError:
            raise Unreachable(f"{self.server} answered {status} with something other than JSON: "
                              f"is it a Sundial server?") from None

    def pages(self, path: str, key: str, limit: int, page_size: int,
              query: dict[str, Any] | None = None) -> Iterator[dict[str, Any]]:
        """Each page of a paged list (`key` and `next_page_token`) until the list ends or
        `limit` rows were asked for; page_size never asks for more than is still wanted."""
        token, wanted = None, limit
        while wanted > 0:
            page = self.call("GET", path, {**(query or {}), "page_size": min(page_size, wanted),
                                           "page_token": token})
            yield page
            wanted -= len(page.get(key) or [])
            token = page.get("next_page_token")
            if not token:
                return

    def apply_jobs(self, project: str, entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Create or replace each API job of `entries` (each a job entry with its `id`):
        `[{"id", "status": "created"|"replaced"|"failed", "error"?: {"code", "message"}}]`,
        one per entry in order; one refused does not stop the others. Sent through
        `jobs:batchPut` (`put_jobs`), each job decided as its own PUT would be.

        :raises Unreachable: the server went away (the batches before it were applied).
        """
        jobs = [(str(entry["id"]), {key: value for key, value in entry.items() if key != "id"}) for entry in entries]
        return [_applied(result) for result in self.put_jobs(project, jobs)]

    def put_created(self, path: str, body: dict[str, Any]) -> bool:
        """PUT `body` at `path`: True when it created (201), False when it replaced (200)."""
        return self._send("PUT", path, None, body)[0] == 201


    def put_jobs(self, project: str, jobs: Sequence[tuple[str, dict[str, Any]]]) -> list[dict[str, Any]]:
        """PUT many jobs of a project, (job id, PUT body) each, through `jobs:batchPut` in as few
        requests as its limits allow (MAX_BATCH_JOBS jobs, the request size); one result
        `{"id", "status", "error"?}` per job, in the order given. A job is refused in its
        result, never by an exception; a request the server refuses whole raises ApiFailure,
        and the batches before it stay put (sending them all again is safe)."""
        results: list[dict[str, Any]] = []
        for batch in batch_bodies(jobs):
            answer = self.call("POST", f"/projects/{segment(project)}/jobs:batchPut", body={"jobs": batch})
            results += answer["results"]
        return results


def batch_bodies(jobs: Sequence[tuple[str, dict[str, Any]]], most_jobs: int = MAX_BATCH_JOBS,
                 most_bytes: int = BATCH_BYTES) -> Iterator[list[dict[str, Any]]]:
    """The `jobs` lists of the batch puts that send `jobs` in order: each at most `most_jobs`
    entries and, as JSON, `most_bytes` (a job larger than that alone goes in a batch of its
    own, for the server to refuse with its own words)."""
    batch: list[dict[str, Any]] = []
    size = len('{"jobs": []}')
    for job_id, body in jobs:
        entry = {"id": job_id, "job": body}
        grown = len(json.dumps(entry).encode()) + len(", ")
        if batch and (len(batch) == most_jobs or size + grown > most_bytes):
            yield batch
            batch, size = [], len('{"jobs": []}')
        batch.append(entry)
        size += grown
    if batch:
        yield batch


def _failure(status: int, raw: bytes) -> ApiFailure:
    """The API's `{"error": {"code", "message"}}`, or the start of whatever else came
    (a proxy's HTML page, say) on one line."""
    try:
        error = json.loads(raw)["error"]
        return ApiFailure(status, str(error.get("code", "")), " ".join(str(error["message"]).split()))
    except (ValueError, KeyError, TypeError, AttributeError):
        text = " ".join(raw.decode("utf-8", "replace").split())[:200]
        return ApiFailure(status, "", text or "(no body)")


def _why(error: Exception) -> str:
    reason = getattr(error, "reason", error)
    if isinstance(reason, ConnectionRefusedError):
        return "connection refused (is `serve` running there? set --server or SUNDIAL_SERVER)"
    if isinstance(reason, (socket.timeout, TimeoutError)):
        return "no answer in time"
    if isinstance(reason, socket.gaierror):
        return f"unknown host ({reason.strerror})"
    return str(reason)


def _applied(result: dict[str, Any]) -> dict[str, Any]:
    """A batch put's result (`status` the HTTP status its PUT would have had) as `apply` says it."""
    status = int(result["status"])
    if status in (200, 201):
        return {"id": result["id"], "status": "created" if status == 201 else "replaced"}
    error = result.get("error") or {}
    return {"id": result["id"], "status": "failed",
            "error": {"code": error.get("code", str(status)), "message": error.get("message", "")}}
