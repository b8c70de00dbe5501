"""The lean infer path in front of aiohttp: raw keep-alive connections, pipelining, split bodies, hand-over."""

from __future__ import annotations

import json
import socket
import time

import numpy as np

from tests.serve.tiny_models import expected_logits

HEADER = "Inference-Header-Content-Length"


def _infer_request(x: np.ndarray, path: str = "/v2/models/classifier/infer", extra: str = "") -> bytes:
    header = json.dumps({"inputs": [{"name": "input", "datatype": "FP32", "shape": list(x.shape),
                                     "parameters": {"binary_data_size": x.nbytes}}],
                         "outputs": [{"name": "logits", "parameters": {"binary_data": True}}]}).encode()
    body = header + x.tobytes()
    head = f"POST {path} HTTP/1.1\r\nHost: t\r\nContent-Length: {len(body)}\r\n{HEADER}: {len(header)}\r\n{extra}\r\n"
    return head.encode() + body


class _Conn:
    """One raw keep-alive connection that reads Content-Length framed answers."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.buf = b""

    def answer(self) -> tuple[int, dict[str, str], bytes]:
        while b"\r\n\r\n" not in self.buf:
            self._more()
        head, self.buf = self.buf.split(b"\r\n\r\n", 1)
        lines = head.decode().split("\r\n")
        headers = {k.lower(): v.strip() for k, v in (line.split(":", 1) for line in lines[1:])}
        length = int(headers["content-length"])
        while len(self.buf) < length:
            self._more()
        body, self.buf = self.buf[:length], self.buf[length:]
        return int(lines[0].split()[1]), headers, body

    def _more(self) -> None:
        data = self.sock.recv(65536)
        assert data, "connection closed"
        self.buf += data

    def close(self) -> None:
        self.sock.close()


def _logits(headers: dict, body: bytes) -> np.ndarray:
    n = int(headers[HEADER.lower()])
    out = json.loads(body[:n])["outputs"][0]
    return np.frombuffer(body[n:], np.float32).reshape(out["shape"])


def _expect_logits(c: _Conn, x: np.ndarray) -> dict:
    """Read the next answer: 200, binary, with the model's logits for x; returns its JSON header."""
    status, headers, body = c.answer()
    assert status == 200, body
    assert headers["content-type"] == "application/octet-stream"
    np.testing.assert_allclose(_logits(headers, body), expected_logits(x), rtol=1e-5)
    return json.loads(body[: int(headers[HEADER.lower()])])


def test_pipelined_infers_then_hand_over_to_aiohttp_on_the_same_connection(server):
    c = _Conn(server.ports["http"])
    try:
        xs = [np.full((1 + i, 4), i, np.float32) for i in range(3)]
        c.sock.sendall(b"".join(_infer_request(x) for x in xs))  # three requests in one send
        for x in xs:
            _expect_logits(c, x)
        # a request the lean path does not take: aiohttp answers it, then the next infer, on this connection
        c.sock.sendall(b"GET /v2/health/ready HTTP/1.1\r\nHost: t\r\n\r\n")
        assert c.answer()[0] == 200
        x = np.ones((2, 4), np.float32)
        c.sock.sendall(_infer_request(x))
        _expect_logits(c, x)
    finally:
        c.close()


def test_a_body_in_pieces_and_errors_keep_the_connection(server):
    c = _Conn(server.ports["http"])
    try:
        x = np.arange(8, dtype=np.float32).reshape(2, 4)
        request = _infer_request(x, "/v2/models/classifier/versions/1/infer")
        for i in range(0, len(request), 7):  # head and body split across many segments
            c.sock.sendall(request[i : i + 7])
            time.sleep(0.001)
        assert _expect_logits(c, x)["model_version"] == "1"
        bad = _infer_request(x).replace(f"{HEADER}: ".encode(), f"{HEADER}: x".encode())
        c.sock.sendall(bad)
        status, headers, body = c.answer()
        assert status == 400 and headers["content-type"] == "application/json"
        assert json.loads(body)["error"].startswith(f"{HEADER} must be an integer")
        c.sock.sendall(_infer_request(x, "/v2/models/nope/infer"))
        status, _, body = c.answer()
        assert status == 400 and json.loads(body) == {"error": "Request for unknown model: 'nope' is not found"}
        c.sock.sendall(_infer_request(x))
        assert c.answer()[0] == 200
    finally:
        c.close()


def test_chunked_bodies_go_to_aiohttp_and_are_answered_alike(server):
    c = _Conn(server.ports["http"])
    try:
        x = np.ones((1, 4), np.float32)
        request = _infer_request(x)
        head, body = request.split(b"\r\n\r\n", 1)
        head = b"\r\n".join(line for line in head.split(b"\r\n") if not line.startswith(b"Content-Length"))
        chunked = head + b"\r\nTransfer-Encoding: chunked\r\n\r\n" + b"%x\r\n" % len(body) + body + b"\r\n0\r\n\r\n"
        c.sock.sendall(chunked)
        _expect_logits(c, x)
    finally:
        c.close()


def test_declared_bodies_take_no_memory_before_they_arrive(server):
    import psutil

    proc = psutil.Process()  # the test server runs in this process
    before = proc.memory_info().rss
    declared = 48 * 2**20  # under the 64 MiB body limit, so the lean path takes these requests
    conns = []
    for _ in range(8):
        c = _Conn(server.ports["http"])
        head = (f"POST /v2/models/classifier/infer HTTP/1.1\r\nHost: t\r\nContent-Length: {declared}\r\n"
                f"{HEADER}: 100\r\n\r\n")
        c.sock.sendall(head.encode() + b"{" * 1024)
        conns.append(c)
    time.sleep(0.5)  # the server reads the heads and sets up each body's buffer
    grown = proc.memory_info().rss - before
    for c in conns:
        c.close()
    # zero-filled buffers would hold 8 x 48 MiB = 384 MiB here
    assert grown < 64 * 2**20, f"RSS grew {grown / 2**20:.0f} MiB for bodies that never came"
    c = _Conn(server.ports["http"])
    x = np.random.rand(2, 4).astype(np.float32)
    c.sock.sendall(_infer_request(x))
    try:
        _expect_logits(c, x)
    finally:
        c.close()


def test_the_aiohttp_hand_over_serves_the_bytes_read_before_and_after_it():
    """serve/protocol/http_fast.py hands a connection to aiohttp as this test does: asyncio's Transport.set_protocol to a
    handler from aiohttp's web.Server factory, its connection_made(transport), then data_received(bytes) with
    what the lean path read but did not parse. aiohttp must then answer that request and the next ones that
    arrive on the same connection afterwards; an aiohttp or asyncio that changes this fails here (pyproject
    pins the tested aiohttp range)."""
    import asyncio

    import aiohttp
    from aiohttp import web

    async def echo(request: web.Request) -> web.Response:
        return web.Response(text=f"{request.method} {request.path} {await request.text()}")

    class Lean(asyncio.Protocol):
        """Reads a first chunk, then hands the connection and those bytes to aiohttp, as the lean path does."""

        def __init__(self, factory) -> None:
            self.factory = factory

        def connection_made(self, transport) -> None:
            self.transport = transport

        def data_received(self, data: bytes) -> None:
            handler = self.factory()
            self.transport.set_protocol(handler)
            handler.connection_made(self.transport)
            handler.data_received(data)

    async def check() -> list[bytes]:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", echo)
        runner = web.AppRunner(app, handle_signals=False)
        await runner.setup()
        server = await asyncio.get_running_loop().create_server(lambda: Lean(runner.server), "127.0.0.1", 0)
        try:
            port = server.sockets[0].getsockname()[1]
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            first = b"POST /v2/a HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n\r\nhel"
            writer.write(first)  # the hand-over happens on these bytes: a request cut in its body
            await asyncio.sleep(0.05)
            writer.write(b"lo")  # the rest of the body reaches aiohttp through the transport
            answers = [await _read_answer(reader)]
            writer.write(b"GET /v2/health/ready HTTP/1.1\r\nHost: t\r\n\r\n")  # keep-alive: the next request
            answers.append(await _read_answer(reader))
            writer.close()
            return answers
        finally:
            server.close()
            await server.wait_closed()
            await runner.cleanup()

    answers = asyncio.run(asyncio.wait_for(check(), 20))
    assert answers == [b"POST /v2/a hello", b"GET /v2/health/ready "], f"aiohttp {aiohttp.__version__}: {answers}"


async def _read_answer(reader) -> bytes:
    """The body of one Content-Length framed HTTP/1.1 answer with status 200."""
    head = await reader.readuntil(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200"), head
    length = next(int(line.split(b":", 1)[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:"))
    return await reader.readexactly(length)
