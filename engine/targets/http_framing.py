"""The framing of an HTTP/1.1 answer as the batch writer reads it off a non-blocking
socket (http_batch.py): the common answer (a status, headers, a Content-Length body) is
cut here; anything else goes to http.client, which reads it or refuses it."""

from __future__ import annotations

from engine.targets.http_pool import Answer


class Complex:
    """Any other framing: for http.client."""


COMPLEX = Complex()


def parse_answer(data: bytes, limit: int, final: bool = False) -> tuple[Answer, bool] | Complex | None:
    """(Answer, reusable) for a complete answer with a Content-Length; None: incomplete;
    COMPLEX: any other framing, or bytes that are not HTTP, for http.client to read (or
    refuse). `final`: the deadline has come, so an answer whose head is complete ends
    with the part of its body that arrived (the status decides, as on the blocking path)."""
    if not b"HTTP/".startswith(data[:5]):
        return COMPLEX  # not an answer at all: http.client says so at once
    end = data.find(b"\r\n\r\n")
    if end < 0:
        return None if len(data) < 65536 else COMPLEX
    lines = data[:end].decode("latin-1").split("\r\n")
    parts = lines[0].split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
        return COMPLEX
    status = int(parts[1])
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if not sep:
            return COMPLEX
        headers[name.strip().lower()] = value.strip()
    length = headers.get("content-length", "")
    if status < 200 or "transfer-encoding" in headers or not length.isdigit():
        return COMPLEX
    body, total = data[end + 4:], int(length)
    if len(body) < min(total, limit) and not final:
        return None
    complete = total <= limit and len(body) == total
    close = headers.get("connection", "").lower() == "close" or parts[0] == "HTTP/1.0"
    answer = Answer(status, parts[2] if len(parts) > 2 else "", body[:limit], complete, headers.get("location"))
    return answer, complete and not close
