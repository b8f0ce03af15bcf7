"""Targets that fail in every way a target can, each a real listener on 127.0.0.1 (or a
port nothing listens on, or a name that never resolves), for the target fault suite
(tests/e2e/test_target_faults.py).

Each case says how its attempt must end: the status, a pattern its reason matches, and
how long after it began the invocation may end (the attempt's timeout plus a second, or
less). The TLS cases use a certificate authority made here (`TestAuthority`), trusted by
a server process through SSL_CERT_FILE, so that "unknown issuer" (a self-signed
certificate), "wrong name" and "expired" are each the only thing wrong.
"""

from __future__ import annotations

import datetime
import ipaddress
import socket
import ssl
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

UNRESOLVABLE_HOST = "sundial-fault.invalid"  # .invalid never resolves (RFC 6761)
TRICKLE = 0.3  # seconds between the bytes of a slow answer


@dataclass(frozen=True)
class Case:
    name: str
    status: str  # how the invocation ends
    reason: str  # a substring its reason holds
    why: str  # what the target does, for the table
    at_once: bool = True  # ends without waiting for the timeout (False: it runs out the timeout)


CASES = [
    Case("refused", "FAILED", "connection refused", "nothing listens on the port"),
    Case("unresolvable", "FAILED", "cannot resolve", f"the host name ({UNRESOLVABLE_HOST}) does not resolve"),
    Case("reset", "FAILED", "connection reset", "reads the request, then resets the connection"),
    Case("closed", "FAILED", "closed connection without response", "reads the request, then closes without an answer"),
    Case("not-http", "FAILED", "the answer is not HTTP", "answers a line that is not HTTP, and stays open"),
    Case("slow-headers", "FAILED", "timeout", f"sends a status line, then a header byte every {TRICKLE:g} s",
         at_once=False),
    Case("slow-body", "FAILED", "http 500", f"answers 500 with a 100 kB body, a byte every {TRICKLE:g} s",
         at_once=False),
    Case("silent", "FAILED", "timeout", "accepts the connection and never answers", at_once=False),
    Case("no-accept", "FAILED", "timeout", "a full accept queue: the connection is never set up", at_once=False),
    Case("tls-unknown-issuer", "FAILED", "self-signed certificate", "TLS with a self-signed certificate"),
    Case("tls-wrong-name", "FAILED", "mismatch", "TLS with a certificate for another name"),
    Case("tls-expired", "FAILED", "certificate has expired", "TLS with a certificate that has expired"),
    Case("redirect-loop", "FAILED", "too many redirects", "answers 302 to itself"),
    Case("huge-answer", "FAILED", "http 500", "answers 500 with an endless chunked body"),
]


class TestAuthority:
    """A certificate authority of the tests' own, and certificates it signs."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "Sundial test authority")])
        now = datetime.datetime.now(datetime.timezone.utc)
        self.cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
                     .public_key(self.key.public_key()).serial_number(x509.random_serial_number())
                     .not_valid_before(now - datetime.timedelta(days=1))
                     .not_valid_after(now + datetime.timedelta(days=30))
                     .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                     .sign(self.key, hashes.SHA256()))
        self.bundle = folder / "authority.pem"
        self.bundle.write_bytes(self.cert.public_bytes(serialization.Encoding.PEM))

    def context(self, kind: str) -> ssl.SSLContext:
        """A server context whose certificate is wrong in one way: `unknown-issuer`,
        `wrong-name` or `expired`."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.timezone.utc)
        wrong = kind == "wrong-name"
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "other.example" if wrong else "127.0.0.1")])
        names: list[x509.GeneralName] = ([x509.DNSName("other.example")] if wrong
                                         else [x509.IPAddress(ipaddress.ip_address("127.0.0.1"))])
        issuer, signer = (subject, key) if kind == "unknown-issuer" else (self.cert.subject, self.key)
        begins, ends = ((now - datetime.timedelta(days=30), now - datetime.timedelta(days=1)) if kind == "expired"
                        else (now - datetime.timedelta(days=1), now + datetime.timedelta(days=30)))
        cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer).public_key(key.public_key())
                .serial_number(x509.random_serial_number()).not_valid_before(begins).not_valid_after(ends)
                .add_extension(x509.SubjectAlternativeName(names), critical=False)
                .sign(signer, hashes.SHA256()))
        cert_file, key_file = self.folder / f"{kind}.pem", self.folder / f"{kind}.key"
        cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        key_file.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                               serialization.NoEncryption()))
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert_file, key_file)
        return context


@dataclass
class Listener:
    """One misbehaving target: `behave(connection)` runs for each connection accepted."""

    behave: Callable[[socket.socket], None] | None  # None: never accepts
    tls: ssl.SSLContext | None = None
    backlog: int = 64
    sock: socket.socket = field(init=False)
    _closing: threading.Event = field(default_factory=threading.Event)
    _open: list[socket.socket] = field(default_factory=list)

    def __post_init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(self.backlog)
        if self.behave is not None:
            threading.Thread(target=self._accept, daemon=True).start()

    @property
    def port(self) -> int:
        return self.sock.getsockname()[1]

    def _accept(self) -> None:
        while not self._closing.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self._open.append(conn)
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        try:
            if self.tls is not None:
                conn.settimeout(5)
                conn = self.tls.wrap_socket(conn, server_side=True)  # fails for a refused certificate
            self.behave(conn)  # type: ignore[misc]
        except OSError:
            pass

    def close(self) -> None:
        self._closing.set()
        for conn in [self.sock, *self._open]:
            try:
                conn.close()
            except OSError:
                pass


def _read_request(conn: socket.socket) -> bytes:
    data = b""
    conn.settimeout(10)
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            break
        data += chunk
    return data


def _reset(conn: socket.socket) -> None:
    _read_request(conn)
    conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    conn.close()


def _close(conn: socket.socket) -> None:
    _read_request(conn)
    conn.close()


def _not_http(conn: socket.socket) -> None:
    _read_request(conn)
    conn.sendall(b"SSH-2.0-OpenSSH_9.2 hello\r\n")
    time.sleep(30)


def _trickle(head: bytes, drip: bytes) -> Callable[[socket.socket], None]:
    def behave(conn: socket.socket) -> None:
        _read_request(conn)
        conn.sendall(head)
        for _ in range(200):
            time.sleep(TRICKLE)
            conn.sendall(drip)
    return behave


def _silent(conn: socket.socket) -> None:
    _read_request(conn)
    time.sleep(60)


def _redirect_loop(conn: socket.socket) -> None:
    while _read_request(conn):
        conn.sendall(b"HTTP/1.1 302 Found\r\nLocation: /again\r\nContent-Length: 0\r\n\r\n")


def _endless(conn: socket.socket) -> None:
    _read_request(conn)
    conn.sendall(b"HTTP/1.1 500 Internal Server Error\r\nTransfer-Encoding: chunked\r\n\r\n")
    chunk = b"%x\r\n%s\r\n" % (65536, b"x" * 65536)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        conn.sendall(chunk)


class Targets:
    """Every case's target, started; `url(case)` is where a job sends its requests."""

    def __init__(self, folder: Path):
        self.authority = TestAuthority(folder)
        self._refused = socket.socket()  # bound, never listening: connecting is refused
        self._refused.bind(("127.0.0.1", 0))
        self._listeners: dict[str, Listener] = {
            "reset": Listener(_reset),
            "closed": Listener(_close),
            "not-http": Listener(_not_http),
            "slow-headers": Listener(_trickle(b"HTTP/1.1 200 OK\r\n", b"X")),
            "slow-body": Listener(_trickle(b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 100000\r\n\r\n",
                                           b"x")),
            "silent": Listener(_silent),
            "no-accept": self._full_queue(),
            "tls-unknown-issuer": Listener(_silent, tls=self.authority.context("unknown-issuer")),
            "tls-wrong-name": Listener(_silent, tls=self.authority.context("wrong-name")),
            "tls-expired": Listener(_silent, tls=self.authority.context("expired")),
            "redirect-loop": Listener(_redirect_loop),
            "huge-answer": Listener(_endless),
        }

    def _full_queue(self) -> Listener:
        """A listener that never accepts, its accept queue filled: a new connection's
        handshake is never answered, as with a host that drops packets."""
        listener = Listener(None, backlog=0)
        self._fillers = []
        for _ in range(4):
            filler = socket.socket()
            filler.setblocking(False)
            filler.connect_ex(("127.0.0.1", listener.port))
            self._fillers.append(filler)
        time.sleep(0.2)
        return listener

    def url(self, case: str) -> str:
        if case == "refused":
            return f"http://127.0.0.1:{self._refused.getsockname()[1]}/refused"
        if case == "unresolvable":
            return f"http://{UNRESOLVABLE_HOST}/x"
        listener = self._listeners[case]
        scheme = "https" if case.startswith("tls-") else "http"
        return f"{scheme}://127.0.0.1:{listener.port}/{case}"

    def close(self) -> None:
        self._refused.close()
        for filler in self._fillers:
            filler.close()
        for listener in self._listeners.values():
            listener.close()
