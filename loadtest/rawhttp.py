"""A lean HTTP/1.1 keep-alive client for one request repeated many times (the load generator's hot path).

geventhttpclient, which tritonclient uses, rebuilds and re-validates the request headers and parses
the response into a header object on every call; that costs more CPU than everything else a Locust
user does per request. Here the whole request (request line, headers, body) is encoded once into
bytes and each call only writes them and reads the answer: one `recv_into` a preallocated buffer
usually holds all of it; the status comes from the status line and the body is framed by
Content-Length (or chunked encoding), both found by byte search in the header block, which is kept
raw (`header()` reads a field from it on demand). The framing stays hand-written: httptools'
HttpResponseParser (llhttp) in its place was not shown to be as cheap on this hot path (requests per
Locust CPU-second, docs/BENCHMARKS.md, "Load generator: httptools for the response framing"). Sockets are gevent's (Locust monkey-patches the
standard library), so many users share one process.

Sockets have no gevent timeout: with one, gevent starts and cancels a timer around every wait,
several microseconds a request. Instead each client's watchdog greenlet wakes a few times per
timeout period and shuts down the socket of any call that has run past its deadline; that call
then raises TimeoutError. A call therefore times out between timeout_s and timeout_s + tick.
"""

from __future__ import annotations

from collections import deque
import socket
import time

import gevent
import gevent.lock

_RECV = 65536  # bytes per read; a small inference answer arrives in one


def encode_request(method: str, host: str, path: str, headers: dict[str, str], body: bytes) -> bytes:
    """The exact bytes of one HTTP/1.1 request with a Content-Length body."""
    lines = [f"{method} {path} HTTP/1.1", f"Host: {host}"]
    lines += [f"{k}: {v}" for k, v in headers.items()]
    lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


def _field(head_lower: bytes, key: bytes) -> bytes | None:
    """Value of the header whose b"\\r\\n<name>:" is `key`, in a lower-cased header block, or None."""
    i = head_lower.find(key)
    if i < 0:
        return None
    i += len(key)
    j = head_lower.find(b"\r\n", i)
    return head_lower[i:j].strip() if j >= 0 else head_lower[i:].strip()


def header(head: bytes, name: str) -> str | None:
    """The value of header `name` (any case) in a raw header block as returned by `send`, or None."""
    key = b"\r\n" + name.lower().encode("latin-1") + b":"
    lower = head.lower()
    i = lower.find(key)
    if i < 0:
        return None
    i += len(key)
    j = head.find(b"\r\n", i)
    return (head[i:j] if j >= 0 else head[i:]).strip().decode("latin-1")


_LENGTH = b"\r\ncontent-length:"
_CONNECTION = b"\r\nconnection:"
_ENCODING = b"\r\ntransfer-encoding:"


class _Connection:
    __slots__ = ("sock", "rbuf", "view", "pending", "reusable", "deadline", "timed_out", "timeout_s", "_wait", "_readable")

    def __init__(self, address: tuple[str, int], timeout_s: float) -> None:
        self.sock = socket.create_connection(address, timeout=timeout_s)  # bounded connect
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock.settimeout(None)  # reads and writes are bounded by the client's watchdog
        self.rbuf = bytearray(_RECV)
        self.view = memoryview(self.rbuf)
        self.pending = b""  # bytes read past the previous answer (normally none)
        self.reusable = True
        self.deadline = 0.0  # time.monotonic() by which the call in progress must end; 0: idle
        self.timed_out = False
        self.timeout_s = timeout_s
        # gevent's socket waits on its own read watcher; waiting first spares the read that would
        # fail with EAGAIN (a syscall and an exception) right after sending. Plain sockets: no wait.
        self._wait = getattr(self.sock, "_wait", None)
        self._readable = getattr(self.sock, "_read_event", None)

    def _more(self) -> bytes:
        n = self.sock.recv_into(self.rbuf)
        if not n:
            raise ConnectionError("the server closed the connection")
        return bytes(self.view[:n])

    def roundtrip(self, request: bytes) -> tuple[int, bytes, bytes]:
        try:
            return self._roundtrip(request)
        except OSError:
            if self.timed_out:
                raise TimeoutError(f"no complete answer from the server within {self.timeout_s:g} s (timed out)") \
                    from None
            raise

    def _roundtrip(self, request: bytes) -> tuple[int, bytes, bytes]:
        sock = self.sock
        sent = sock.send(request)
        if sent < len(request):
            sock.sendall(request[sent:])
        if self.pending:
            buf = self.pending + self._more()
        else:
            if self._wait is not None:  # the answer cannot be there yet
                self._wait(self._readable)
            buf = self._more()
        end = buf.find(b"\r\n\r\n")
        while end < 0:
            buf += self._more()
            end = buf.find(b"\r\n\r\n")
        head = buf[:end]
        if head[:7] != b"HTTP/1." or head[12:13] not in (b" ", b"\r", b""):
            raise ConnectionError(f"not an HTTP/1.x answer: {head[:40]!r}")
        status = int(head[9:12])
        lower = head.lower()
        start = end + 4
        length = _field(lower, _LENGTH)
        if length is not None:
            stop = start + int(length)
            while len(buf) < stop:
                buf += self._more()
            body = buf[start:stop]
            self.pending = buf[stop:]
        elif (_field(lower, _ENCODING) or b"") == b"chunked":
            body = self._chunked(buf[start:])
        else:  # body runs to the end of the connection
            acc = bytearray(buf[start:])
            while n := sock.recv_into(self.rbuf):
                acc += self.view[:n]
            body, self.pending, self.reusable = bytes(acc), b"", False
        if _CONNECTION in lower and _field(lower, _CONNECTION) == b"close":
            self.reusable = False
        return status, head, body

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
                self.pending = bytes(acc[start + 2:])
                return bytes(body)
            body += acc[start:start + size]
            pos = start + size + 2

    def expire(self) -> None:
        """Past its deadline: wake the waiting call (it reads end of stream) and make it time out."""
        self.timed_out = True
        self.reusable = False
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def close(self) -> None:
        self.sock.close()


class RawHttpClient:
    """Sends one prepared request over up to `concurrency` keep-alive connections.

    With concurrency 1 (a closed-loop user: one call at a time) there is no semaphore to take.
    """

    def __init__(self, host: str, port: int, concurrency: int = 1, timeout_s: float = 60.0) -> None:
        self.address = (host, port)
        self.timeout_s = timeout_s
        self.tick_s = min(1.0, max(0.05, timeout_s / 10))  # watchdog period, s
        # FIFO, so requests spread over every open connection as independent clients' would: with a stack the
        # top few carried most of them, and a server whose front-end processes share a port by connection
        # (SO_REUSEPORT) saw one process at a core while others idled. deque ops never yield to other greenlets.
        self.idle: deque[_Connection] = deque()
        self.conns: set[_Connection] = set()
        self.slots = gevent.lock.BoundedSemaphore(concurrency) if concurrency > 1 else None
        self._watchdog: gevent.Greenlet | None = None

    def send(self, request: bytes) -> tuple[int, bytes, bytes]:
        """(status, raw header block, body) of one request/response exchange; see `header()`."""
        if self.slots is None:
            return self._exchange(request)
        with self.slots:
            return self._exchange(request)

    def _connect(self) -> _Connection:
        conn = _Connection(self.address, self.timeout_s)
        self.conns.add(conn)
        if self._watchdog is None:
            self._watchdog = gevent.spawn(self._watch)
        return conn

    def _drop(self, conn: _Connection) -> None:
        self.conns.discard(conn)
        conn.close()

    def _exchange(self, request: bytes) -> tuple[int, bytes, bytes]:
        idle = self.idle
        reused = bool(idle)
        conn = idle.popleft() if reused else self._connect()
        conn.deadline = time.monotonic() + self.timeout_s
        try:
            result = conn.roundtrip(request)
        except (ConnectionError, BrokenPipeError):
            self._drop(conn)
            if not reused:
                raise
            # an idle keep-alive connection the server has since closed: once more on a new one
            conn = self._connect()
            conn.deadline = time.monotonic() + self.timeout_s
            try:
                result = conn.roundtrip(request)
            except BaseException:
                self._drop(conn)
                raise
        except BaseException:
            self._drop(conn)  # state unknown after a failure: never reuse
            raise
        conn.deadline = 0.0
        if conn.reusable:
            idle.append(conn)
        else:
            self._drop(conn)
        return result

    def _watch(self) -> None:
        while True:
            gevent.sleep(self.tick_s)
            now = time.monotonic()
            for conn in list(self.conns):
                if conn.deadline and now > conn.deadline:
                    conn.expire()

    def close(self) -> None:
        if self._watchdog is not None:
            self._watchdog.kill(block=False)
            self._watchdog = None
        for conn in list(self.conns):
            self._drop(conn)
        self.idle.clear()
