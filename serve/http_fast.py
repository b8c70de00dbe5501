"""A lean HTTP/1.1 path for the one hot request, POST /v2/models/<m>[/versions/<v>]/infer, in front of aiohttp.

Every connection starts here. A request that is a plain keep-alive HTTP/1.1 POST to an infer path,
with one Content-Length within the body limit and no Content-Encoding, Transfer-Encoding, Expect,
Upgrade or query string, is parsed and answered by this protocol: its body is received straight
into one buffer (recv_into, no chunk list, no joins), and the answer goes out in one write. The
first request that is anything else hands the connection, with every byte not yet parsed, to
aiohttp's own request handler for good; aiohttp then answers it exactly as before (health,
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
from typing import TYPE_CHECKING

import numpy as np
from aiohttp.http import SERVER_SOFTWARE

from trainserve.serve.errors import ServeError

if TYPE_CHECKING:
    from trainserve.serve.http import HttpFrontEnd

log = logging.getLogger(__name__)

MAX_HEAD_BYTES = 16384  # a request head longer than this goes to aiohttp (which limits and answers it)
SCRATCH_BYTES = 16384  # per-connection receive buffer for heads and the small bodies that arrive with them, bytes
PAUSE_BYTES = 1 << 20  # stop reading a connection that sends this much ahead of its answers, bytes
KEEPALIVE_S = 75.0  # an idle keep-alive connection is closed after this long, seconds (aiohttp's default)
_HANDOVER_HEADERS = (b"transfer-encoding", b"expect", b"upgrade")
_REASONS = {s.value: s.phrase.encode() for s in HTTPStatus}
_INTERNAL_ERROR = b"500 Internal Server Error\n\nServer got itself in trouble"

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

    def __init__(self, frontend: HttpFrontEnd, aiohttp_handler: Callable[[], asyncio.Protocol]) -> None:
        self.frontend = frontend
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
        self._read_paused = False
        self._write_paused = False

    # ------------------------------------------------------------- asyncio callbacks
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.last_active = asyncio.get_running_loop().time()
        self.frontend.connections.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.frontend.connections.discard(self)
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

    def _parse_head(self, head: bytes) -> tuple[str, str, str | None, int] | None:
        """(model, version, Inference-Header-Content-Length, Content-Length) of a request this path answers."""
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
            return None  # aiohttp answers 411-less bodies and 413s as before
        return target[0], target[1], header_length, length

    def _start(self, body: bytearray | memoryview) -> None:
        self.busy = True
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
        """From now on aiohttp serves this connection, starting with the bytes not yet parsed."""
        self.frontend.connections.discard(self)
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

    def close_when_idle(self) -> None:
        """Shutdown: close now if idle, else right after the answer in flight."""
        self.closing = True
        if not self.busy and self.transport is not None:
            self.transport.close()
