"""A lean HTTP/1.1 keep-alive client for one request repeated many times (the load generator's hot path).

geventhttpclient, which tritonclient uses, rebuilds and re-validates the request headers and parses
the response into a header object on every call; that costs more CPU than everything else a Locust
user does per request. Here the whole request (request line, headers, body) is encoded once into
bytes and each call only writes them and reads the answer: status line, headers by plain string
splitting, and a body framed by Content-Length or chunked encoding. Sockets are gevent's (Locust
monkey-patches the standard library), so many users share one process.
"""

from __future__ import annotations

import socket

import gevent.lock
import gevent.queue


class HttpStatusError(Exception):
    def __init__(self, status: int, body: bytes) -> None:
        super().__init__(status)
        self.status, self.body = status, body


def encode_request(method: str, host: str, path: str, headers: dict[str, str], body: bytes) -> bytes:
    """The exact bytes of one HTTP/1.1 request with a Content-Length body."""
    lines = [f"{method} {path} HTTP/1.1", f"Host: {host}"]
    lines += [f"{k}: {v}" for k, v in headers.items()]
    lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


class _Connection:
    def __init__(self, address: tuple[str, int], timeout_s: float) -> None:
        self.sock = socket.create_connection(address, timeout=timeout_s)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""
        self.reusable = True

    def _more(self) -> bytes:
        chunk = self.sock.recv(262144)
        if not chunk:
            raise ConnectionError("the server closed the connection")
        return chunk

    def roundtrip(self, request: bytes) -> tuple[int, dict[str, str], bytes]:
        self.sock.sendall(request)
        buf = self.buf
        end = buf.find(b"\r\n\r\n")
        while end < 0:
            buf += self._more()
            end = buf.find(b"\r\n\r\n")
        lines = buf[:end].decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ", 2)[1])
        headers = {}
        for line in lines[1:]:
            k, _, v = line.partition(":")
            headers[k.strip().lower()] = v.strip()
        rest = buf[end + 4:]
        length = headers.get("content-length")
        if length is not None:
            n = int(length)
            if len(rest) < n:
                acc = bytearray(rest)
                while len(acc) < n:
                    acc += self._more()
                rest = bytes(acc)
            body, self.buf = rest[:n], rest[n:]
        elif headers.get("transfer-encoding", "").lower() == "chunked":
            body = self._chunked(rest)
        else:  # body runs to the end of the connection
            acc = bytearray(rest)
            while chunk := self.sock.recv(262144):
                acc += chunk
            body, self.buf, self.reusable = bytes(acc), b"", False
        if headers.get("connection", "").lower() == "close":
            self.reusable = False
        return status, headers, body

    def _chunked(self, rest: bytes) -> bytes:
        acc = bytearray(rest)
        body = bytearray()
        pos = 0
        while True:
            eol = acc.find(b"\r\n", pos)
            while eol < 0:
                acc += self._more()
                eol = acc.find(b"\r\n", pos)
            size = int(bytes(acc[pos:eol]).split(b";")[0], 16)
            start = eol + 2
            while len(acc) < start + size + 2:
                acc += self._more()
            if size == 0:  # last chunk; no trailers expected from inference servers
                self.buf = bytes(acc[start + 2:])
                return bytes(body)
            body += acc[start:start + size]
            pos = start + size + 2

    def close(self) -> None:
        self.sock.close()


class RawHttpClient:
    """Sends one prepared request over up to `concurrency` keep-alive connections."""

    def __init__(self, host: str, port: int, concurrency: int = 1, timeout_s: float = 60.0) -> None:
        self.address = (host, port)
        self.timeout_s = timeout_s
        self.idle: gevent.queue.LifoQueue = gevent.queue.LifoQueue()
        self.slots = gevent.lock.BoundedSemaphore(concurrency)

    def send(self, request: bytes) -> tuple[int, dict[str, str], bytes]:
        """(status, lower-cased headers, body) of one request/response exchange."""
        with self.slots:
            reused = not self.idle.empty()
            conn = self.idle.get_nowait() if reused else _Connection(self.address, self.timeout_s)
            try:
                result = conn.roundtrip(request)
            except (ConnectionError, BrokenPipeError):
                conn.close()
                if not reused:
                    raise
                # an idle keep-alive connection the server has since closed: once more on a new one
                conn = _Connection(self.address, self.timeout_s)
                try:
                    result = conn.roundtrip(request)
                except BaseException:
                    conn.close()
                    raise
            except BaseException:
                conn.close()  # state unknown after a failure: never reuse
                raise
            if conn.reusable:
                self.idle.put(conn)
            else:
                conn.close()
            return result

    def close(self) -> None:
        while not self.idle.empty():
            self.idle.get_nowait().close()
