"""A lean HTTP/1.1 path for the one hot request, POST /v2/models/<m>[/versions/<v>]/infer, in front of aiohttp.

Every connection starts here. A request that is a plain keep-alive HTTP/1.1 POST to an infer path,
with one Content-Length within the body limit and no Content-Encoding, Transfer-Encoding, Expect,
Upgrade or query string, is parsed and answered by this protocol: its body is received straight
into one buffer (recv_into, no chunk list, no joins), and the answer goes out in one write. The
first request that is anything else hands the connection, with every byte not yet parsed, to
aiohttp's own request handler for good; aiohttp then answers it as it would alone (health,
metadata, gzip, chunked bodies, 413, malformed heads, ...). Both paths call the same
HttpFrontEnd.infer_payload, so answers and error messages are the same.

Why: per batch-1 request aiohttp's machinery (request and response objects, header multidicts,
the body's chunk list and copies, a task per request) cost more server time than the model run
(docs/BENCHMARKS.md).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from email.utils import formatdate
from http import HTTPStatus
from typing import Protocol

import numpy as np
from aiohttp.http import SERVER_SOFTWARE

from trainserve.serve.engine import heap
from trainserve.serve.request_errors import RequestTimeout, ServeError, TooManyConnections
from trainserve.serve.protocol.refusals import Refusals

log = logging.getLogger(__name__)

MAX_HEAD_BYTES = 16384  # a request head longer than this goes to aiohttp (which limits and answers it)
SCRATCH_BYTES = 16384  # per-connection receive buffer for heads and the small bodies that arrive with them, bytes
PAUSE_BYTES = 1 << 20  # stop reading a connection that sends this much ahead of its answers, bytes
KEEPALIVE_S = 75.0  # an idle keep-alive connection is closed after this long, seconds (aiohttp's default)
_HANDOVER_HEADERS = (b"transfer-encoding", b"expect", b"upgrade")
_REASONS = {s.value: s.phrase.encode() for s in HTTPStatus}
_INTERNAL_ERROR = b"500 Internal Server Error\n\nServer got itself in trouble"
_CLOSE = b"Connection: close\r\n"


class InferFrontEnd(Protocol):
    """What the lean path needs from the HTTP front end (serve/protocol/http.py's HttpFrontEnd)."""

    max_body_bytes: int

    def error_body(self, e: ServeError) -> bytes: ...

    async def infer_payload(self, model: str, version: str, header_length: str | None,
                            body: bytes | bytearray | memoryview) -> tuple[bytes, int | None]: ...


class ConnectionTable:
    """Every open HTTP connection of one server: the cap on how many, and the deadlines of those on the lean path.

    Connections handed over to aiohttp leave `fast` but stay counted in `_open` (by transport) until they
    close: after a hand-over their connection_lost goes to aiohttp, so closed ones are pruned when the
    cap is reached instead.
    """

    def __init__(self, max_connections: int, request_timeout_s: float, keepalive_s: float = KEEPALIVE_S,
                 refusals: Refusals | None = None) -> None:
        self.refusals = refusals or Refusals()  # the server's counters for /metrics (serve/protocol/refusals.py)
        self.max_connections = max_connections
        self.request_timeout_s = request_timeout_s  # a request head + body not received within this: 408, close
        self.keepalive_s = keepalive_s  # an idle connection between requests is closed after this, silently
        self.fast: set[FastConnection] = set()  # open connections on the lean infer path
        self._open: set[asyncio.BaseTransport] = set()
        self.trim_due = False  # a timed-out request dropped a body: give the heap's free memory back

    def __len__(self) -> int:
        return sum(1 for t in self._open if not t.is_closing())

    def admit(self, transport: asyncio.BaseTransport) -> bool:
        """Count a new connection in, or refuse it (False) when the server already holds max_connections."""
        if len(self._open) >= self.max_connections:
            self._open = {t for t in self._open if not t.is_closing()}
            if len(self._open) >= self.max_connections:
                self.refusals.add("http", "connections", warning="refused {n} connection(s): the server holds "
                                  f"its limit of {self.max_connections} (--max-connections)")
                return False
        self._open.add(transport)
        return True

    def release(self, transport: asyncio.BaseTransport) -> None:
        self._open.discard(transport)

    async def sweep(self) -> None:
        """Forever: close lean-path connections past their request deadline (408) or idle past keep-alive (silently)."""
        loop = asyncio.get_running_loop()
        # a deadline is enforced within a quarter of itself: one pass over the connections, not a timer per request
        every = max(0.05, min(self.request_timeout_s, self.keepalive_s) / 4)
        while True:
            await asyncio.sleep(every)
            now = loop.time()
            late, idle_since = now - self.request_timeout_s, now - self.keepalive_s
            for conn in list(self.fast):
                if conn.busy:
                    continue
                if conn.waiting_since is not None:
                    if conn.waiting_since < late:
                        if conn.timed_out(self.request_timeout_s):
                            self.refusals.add("http", "body_timeout")
                        self.trim_due = True
                elif conn.last_active < idle_since:
                    conn.close_when_idle()
            if self.trim_due:
                # bodies of many MiB that never finished would otherwise stay in RSS (glibc keeps freed heap)
                self.trim_due = False
                await asyncio.sleep(0)  # let the closes run first
                heap.trim()


_date = [0, b""]


def _http_date() -> bytes:
    """The Date header's value, formatted once a second."""
    now = int(time.time())
    if now != _date[0]:
        _date[0], _date[1] = now, formatdate(now, usegmt=True).encode()
    return _date[1]


def response_bytes(status: int, body: bytes, content_type: bytes, extra: bytes = b"") -> bytes:
    """One HTTP/1.1 response with the headers aiohttp would send."""
    return b"".join((
        b"HTTP/1.1 %d %s\r\n" % (status, _REASONS.get(status, b"Unknown")), extra,
        b"Content-Type: ", content_type, b"\r\nContent-Length: %d\r\nDate: " % len(body), _http_date(),
        b"\r\nServer: ", SERVER_SOFTWARE.encode(), b"\r\n\r\n", body,
    ))


def _infer_target(target: bytes) -> tuple[str, str] | None:
    """(model, version) of a plain infer path, else None (the request goes to aiohttp)."""
    if b"?" in target or b"%" in target or not target.startswith(b"/v2/models/") or not target.endswith(b"/infer"):
        return None
    parts = target[11:-6].split(b"/")
    if len(parts) == 1:
        model, version = parts[0], b""
    elif len(parts) == 3 and parts[1] == b"versions" and parts[2]:
        model, version = parts[0], parts[2]
    else:
        return None
    if not model or model == b"stats":
        return None
    try:
        return model.decode(), version.decode()
    except UnicodeDecodeError:
        return None


class FastConnection(asyncio.BufferedProtocol):
    """One client connection: answers infer requests itself until a request needs aiohttp."""

    def __init__(self, frontend: InferFrontEnd, table: ConnectionTable,
                 aiohttp_handler: Callable[[], asyncio.Protocol]) -> None:
        self.frontend = frontend
        self.table = table
        self._aiohttp_handler = aiohttp_handler
        self.transport: asyncio.Transport | None = None
        self._scratch = bytearray(SCRATCH_BYTES)
        self._pending = bytearray()  # received bytes not parsed yet
        self._body: memoryview | None = None  # the body being received straight into place
        self._body_got = 0
        self._request: tuple[str, str, str | None] | None = None  # model, version, header length of that body
        self.busy = False  # a request is being answered
        self.closing = False  # close once the answer in flight is written
        self.last_active = 0.0  # loop.time() of the last answer
        self.waiting_since: float | None = None  # loop.time() since a request (or a new connection) waits for bytes
        self._read_paused = False
        self._write_paused = False

    # ------------------------------------------------------------- asyncio callbacks
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        if not self.table.admit(transport):
            # answered before any request is read: a client sees why, not only a reset
            self.closing = True
            e = TooManyConnections(self.table.max_connections)
            transport.write(response_bytes(e.http_status, self.frontend.error_body(e), b"application/json", _CLOSE))
            transport.close()
            return
        # the first request's head is due within the request deadline of the connection's opening
        self.last_active = self.waiting_since = asyncio.get_running_loop().time()
        self.table.fast.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.table.fast.discard(self)
        self.table.release(self.transport)
        self._body = None
        self.closing = True

    def get_buffer(self, sizehint: int) -> memoryview:
        if self._body is not None:
            return self._body[self._body_got :]  # exactly the rest of this body, never beyond
        return memoryview(self._scratch)

    def buffer_updated(self, nbytes: int) -> None:
        if self._body is not None:
            self._body_got += nbytes
            if self._body_got == len(self._body):
                body, self._body = self._body, None
                self._start(body)
            return
        self._pending += memoryview(self._scratch)[:nbytes]
        if not self.busy:
            self._next()
        elif len(self._pending) > PAUSE_BYTES and not self._read_paused:
            self._read_paused = True
            self.transport.pause_reading()

    def eof_received(self) -> bool:
        return False  # the transport closes; an answer in flight is dropped

    def pause_writing(self) -> None:
        self._write_paused = True

    def resume_writing(self) -> None:
        self._write_paused = False
        if not self.busy and self.transport is not None:
            self._next()

    # ------------------------------------------------------------- requests
    def _next(self) -> None:
        """Parse the next request from the pending bytes: start it, wait for more bytes, or hand over."""
        if self.closing or self._write_paused:
            return
        if self._read_paused:
            self._read_paused = False
            self.transport.resume_reading()
        pending = self._pending
        if not pending:
            return
        end = pending.find(b"\r\n\r\n", 0, MAX_HEAD_BYTES)
        if end < 0:
            if len(pending) >= MAX_HEAD_BYTES:
                self._handover()
            elif self.waiting_since is None:
                self.waiting_since = asyncio.get_running_loop().time()  # the head's deadline starts
            return
        request = self._parse_head(bytes(pending[:end]))
        if request is None:
            self._handover()
            return
        model, version, header_length, length = request
        start = end + 4
        self._request = (model, version, header_length)
        if len(pending) - start >= length:
            body = pending[start : start + length]
            del pending[: start + length]
            self._start(body)
        else:
            # np.empty, not bytearray(length): a bytearray is zero-filled, which commits the memory of a
            # declared Content-Length (up to the body limit, 64 MiB by default) before a byte of it arrives,
            # so a few idle connections could take gigabytes. Unwritten pages of np.empty cost nothing.
            self._body = memoryview(np.empty(length, dtype=np.uint8))
            have = len(pending) - start
            self._body[:have] = memoryview(pending)[start:]
            self._body_got = have
            pending.clear()
            if self.waiting_since is None:
                self.waiting_since = asyncio.get_running_loop().time()  # the body's deadline starts

    def _parse_head(self, head: bytes) -> tuple[str, str, str | None, int] | None:
        """(model, version, Inference-Header-Content-Length, Content-Length) of a request this path answers."""
        # Hand-written, not httptools: llhttp driven through its Python callbacks took 1.24-1.42x as long per
        # head (docs/BENCHMARKS.md, "Request-head parsing: hand-written vs httptools"). Anything this
        # parser is unsure of goes to aiohttp, whose own parser answers it.
        lines = head.split(b"\r\n")
        request_line = lines[0].split(b" ")
        if len(request_line) != 3 or request_line[0] != b"POST" or request_line[2] != b"HTTP/1.1":
            return None
        target = _infer_target(request_line[1])
        if target is None:
            return None
        length = header_length = None
        for line in lines[1:]:
            name, sep, value = line.partition(b":")
            if not sep or name != name.strip():
                return None  # malformed or folded header: aiohttp answers it
            name = name.lower()
            value = value.strip()
            if name == b"content-length":
                if length is not None or not value.isdigit():
                    return None
                length = int(value)
            elif name == b"inference-header-content-length":
                if header_length is not None:
                    return None
                header_length = value.decode("latin-1")
            elif name == b"content-encoding":
                if value.lower() != b"identity":
                    return None
            elif name == b"connection":
                if value.lower() != b"keep-alive":
                    return None
            elif name in _HANDOVER_HEADERS:
                return None
        if length is None or length > self.frontend.max_body_bytes:
            return None  # aiohttp answers 411-less bodies and 413s, as it does without this path
        return target[0], target[1], header_length, length

    def _start(self, body: bytearray | memoryview) -> None:
        self.busy = True
        self.waiting_since = None
        model, version, header_length = self._request
        asyncio.get_running_loop().create_task(self._answer(model, version, header_length, body))

    async def _answer(self, model: str, version: str, header_length: str | None, body: bytearray | memoryview) -> None:
        try:
            try:
                payload, json_size = await self.frontend.infer_payload(model, version, header_length, body)
                if json_size is None:
                    out = response_bytes(200, payload, b"application/json")
                else:
                    extra = b"Inference-Header-Content-Length: %d\r\n" % json_size
                    out = response_bytes(200, payload, b"application/octet-stream", extra)
            except ServeError as e:
                out = response_bytes(e.http_status, self.frontend.error_body(e), b"application/json")
        except Exception:
            log.exception("error answering an infer request for model '%s'", model)
            out = response_bytes(500, _INTERNAL_ERROR, b"text/plain; charset=utf-8")
        transport = self.transport
        self.busy = False
        if transport is None or transport.is_closing():
            return
        transport.write(out)
        if self.closing:
            transport.close()
            return
        self.last_active = asyncio.get_running_loop().time()
        if self._pending:
            self._next()

    def _handover(self) -> None:
        """From now on aiohttp serves this connection, starting with the bytes not yet parsed.

        Relies on asyncio's Transport.set_protocol and on aiohttp's web.Server being a factory of
        asyncio.Protocol objects (connection_made / data_received); tests/serve/test_http_fast.py pins both.
        """
        self.table.fast.discard(self)
        self.waiting_since = None  # aiohttp's own deadlines take over
        handler = self._aiohttp_handler()
        self.transport.set_protocol(handler)
        handler.connection_made(self.transport)
        if self._read_paused:
            self._read_paused = False
            self.transport.resume_reading()
        pending, self._pending = bytes(self._pending), bytearray()
        if pending:
            handler.data_received(pending)
        self.transport = None

    def timed_out(self, timeout_s: float) -> bool:
        """The request deadline passed: 408 if any of the request came, then close; nothing if none came.
        True when a request was refused (a 408 sent)."""
        transport = self.transport
        if transport is None or self.closing:
            return False
        started = self._body is not None or bool(self._pending)
        self._body = None  # give a partly received body's memory back now
        self._pending.clear()
        self.closing = True
        if started:
            e = RequestTimeout(timeout_s)
            transport.write(response_bytes(e.http_status, self.frontend.error_body(e), b"application/json", _CLOSE))
        transport.close()
        return started

    def close_when_idle(self) -> None:
        """Shutdown: close now if idle, else right after the answer in flight."""
        self.closing = True
        if not self.busy and self.transport is not None:
            self.transport.close()
