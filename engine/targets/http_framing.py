"""An HTTP/1.1 answer as the batch writer reads it (http_batch.py): h11 parses the bytes
that the writer's own selector loop receives (h11 does no I/O, so one thread can read
every connection's answer), within the limits the blocking pool keeps (http_pool.py):
at most `limit` bytes of the body are kept, an answer whose status arrived ends at the
deadline with what arrived of its body, and bytes that are not HTTP end it at once. Its
failures are named in http_failures' words, as the pool's are.
"""

from __future__ import annotations

import h11

from engine.targets.http_failures import ClosedWithoutAnswer, NotHttp
from engine.targets.http_pool import Answer

HEAD_LIMIT = 65536  # bytes of status line and headers at most (http.client's longest line)
_PREFIX = b"HTTP/"
# What h11 is told of a request (its framing only), made once: a Request validates its
# headers when made, a cost per answer otherwise.
_GET = h11.Request(method="GET", target="/", headers=[("Host", "-")])
_HEAD = h11.Request(method="HEAD", target="/", headers=[("Host", "-")])
_END = h11.EndOfMessage()


class AnswerReader:
    """The answer to one request written on a connection, fed its bytes as they come."""

    def __init__(self, method: str, limit: int):
        self.limit = limit
        self.reusable = False  # once ended: whether the connection may carry another request
        self._parser = h11.Connection(h11.CLIENT, max_incomplete_event_size=HEAD_LIMIT)
        # The request went as bytes encoded ahead; h11 is told of it (not its bytes) since
        # an answer's framing depends on its request: an answer to a HEAD has no body.
        self._parser.send(_HEAD if method.upper() == "HEAD" else _GET)
        self._parser.send(_END)
        self._start = b""  # the answer's first bytes, until there are enough to know it is HTTP
        self._head: h11.Response | None = None
        self._body = bytearray()

    def feed(self, data: bytes) -> Answer | BaseException | None:
        """The answer, or the error that ends it, once `data` (b"": the connection
        closed) completes it; None: more to come."""
        if len(self._start) < len(_PREFIX):
            if not data and not self._start:
                return ClosedWithoutAnswer()
            self._start += data[:len(_PREFIX) - len(self._start)]
            if not _PREFIX.startswith(self._start):  # known at once, not after a whole head
                return NotHttp(f"begins {self._start!r}")
        self._parser.receive_data(data)
        try:
            return self._next()
        except h11.RemoteProtocolError as error:
            # Once the status is in, it decides (a body that fails to arrive only shortens
            # the log), as on the blocking path.
            return self._ended(False) if self._head is not None else NotHttp(str(error)[:200])

    def at_deadline(self) -> Answer | None:
        """The answer as it stands when the request's time is up: its status and the part
        of its body that arrived; None if its status has not arrived."""
        return self._ended(False) if self._head is not None else None

    def _next(self) -> Answer | None:
        while True:
            event = self._parser.next_event()
            if event is h11.NEED_DATA:
                return self._ended(False) if len(self._body) >= self.limit else None
            if isinstance(event, h11.Response):
                self._head = event
            elif isinstance(event, h11.Data):
                self._body += event.data
            elif isinstance(event, h11.EndOfMessage):
                return self._ended(len(self._body) <= self.limit)
            # (h11.InformationalResponse: an interim answer; the final one follows)

    def _ended(self, complete: bool) -> Answer:
        head = self._head
        assert head is not None
        parser = self._parser
        self.reusable = (complete and parser.our_state is h11.DONE and parser.their_state is h11.DONE
                         and not parser.trailing_data[0])
        location = next((value for name, value in head.headers if name == b"location"), None)
        return Answer(head.status_code, head.reason.decode("latin-1"), bytes(self._body[:self.limit]), complete,
                      location.decode("latin-1") if location is not None else None)
