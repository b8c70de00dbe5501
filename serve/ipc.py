"""The control channel between a front-end process and the model process: framed messages on a Unix socket.

Every message is a 9-byte header, then its body:

    <I body length> <B kind> <I request id>   body (marshal of plain tuples, or pickle for the rare calls)

The first message of an event-loop turn is written at once; the ones after it in that turn are
queued and written together at the start of the next turn, and the reader takes whatever chunks the
socket gives: a burst of requests, or of a batch's answers, costs two syscalls each way, not one per
message, and a lone request waits for no loop turn. Tensors do not travel here when they fit the shared arena (serve/shm.py): a tensor is
described by (name, numpy dtype string, shape, arena offset, None), or, when it does not fit or holds
strings, (name, dtype, shape, -1, its bytes or a tuple of its elements).

Kinds (-> the model process, <- the front end):
    INFER  ->  (model, version, tensors, output names or None, output offset, output capacity, requests):
               requests > 1 when the front end merged that many clients' requests into this one (their rows
               in order along dim 0; serve/remote_core.py)
    CALL   ->  (method, *args): a registry call whose answer changes while serving (statistics)
    READY  ->  {"http": port, "grpc": port}: the front end listens
    OK     <-  tensors of the answer
    ERROR  <-  (error class name, message): a serve.errors error, re-raised in the front end
    RESULT <-  pickle of a CALL's answer
    HELLO  <-  pickle of the registry snapshot the front end serves metadata from
"""

from __future__ import annotations

import asyncio
import marshal
import socket
import struct
from collections.abc import Callable

import numpy as np

from trainserve.serve import errors

HEADER = struct.Struct("<IBI")
INFER, CALL, READY, OK, ERROR, RESULT, HELLO = range(1, 8)
SOCKET_BUFFER_BYTES = 4 << 20  # kernel buffer each way: a burst of thousands of messages fits, bytes

Tensor = tuple  # (name, dtype str, shape, offset or -1, inline bytes / tuple of elements / None)


def inline_tensor(name: str, array: np.ndarray) -> Tensor:
    """A tensor carried in the message itself (no arena room, or strings)."""
    if array.dtype == object:
        return name, "O", array.shape, -1, tuple(array.reshape(-1).tolist())
    return name, array.dtype.str, array.shape, -1, np.ascontiguousarray(array).tobytes()


def inline_array(dtype: str, shape: tuple[int, ...], data) -> np.ndarray:
    if dtype == "O":
        out = np.empty(len(data), dtype=object)
        out[:] = data
        return out.reshape(shape)
    return np.frombuffer(data, np.dtype(dtype)).reshape(shape)


def error_message(e: Exception) -> bytes:
    """An error as the ERROR body: a serve.errors class travels by name; anything else is Internal."""
    if isinstance(e, errors.ServeError) and type(e).__module__ == errors.__name__:
        return marshal.dumps((type(e).__name__, e.message))
    return marshal.dumps(("Internal", f"internal error: {type(e).__name__}: {e}"))


def raise_error(body: bytes) -> errors.ServeError:
    """The ServeError an ERROR body describes (built without its class's own __init__ arguments)."""
    name, message = marshal.loads(body)
    cls = getattr(errors, name, errors.Internal)
    if not (isinstance(cls, type) and issubclass(cls, errors.ServeError)):
        cls = errors.Internal
    e = cls.__new__(cls)
    errors.ServeError.__init__(e, message)
    return e


class Link(asyncio.Protocol):
    """One end of the channel: reads frames and hands each to `on_message(kind, rid, body)`; `send` batches."""

    def __init__(self, on_message: Callable[[int, int, bytes], None], on_lost: Callable[[], None]) -> None:
        self._on_message = on_message
        self._on_lost = on_lost
        self.transport: asyncio.Transport | None = None
        self._buf = bytearray()
        self._need = 0  # bytes _buf must hold before its first message is whole
        self._out: list[bytes] = []
        self._flush_due = False
        self.closed = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        # the write buffer may grow large (a burst of answers): never pause the sender on it
        transport.set_write_buffer_limits(high=64 << 20)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._out.clear()
        self._on_lost()

    def data_received(self, data: bytes) -> None:
        if self._buf:  # the rest of a message cut by the previous read comes first
            self._buf += data
            if len(self._buf) < self._need:
                return  # a large message arriving in pieces: no copy until it is whole
            data = bytes(self._buf)
            self._buf.clear()
        pos, size = 0, len(data)
        unpack = HEADER.unpack_from
        while size - pos >= 9:
            length, kind, rid = unpack(data, pos)
            end = pos + 9 + length
            if end > size:
                break
            body = data[pos + 9 : end]
            pos = end
            self._on_message(kind, rid, body)
        if pos < size:
            rest = memoryview(data)[pos:]
            self._buf += rest
            self._need = 9 + unpack(rest)[0] if len(rest) >= 9 else 9  # bytes that complete the next message

    def send(self, kind: int, rid: int, body: bytes) -> None:
        """The first message of a loop turn goes at once (no added latency when requests are few); the
        ones sent after it in the same turn go together, in one write, at the start of the next turn."""
        if self.closed:
            return
        if self._flush_due:
            self._out.append(HEADER.pack(len(body), kind, rid))
            self._out.append(body)
            return
        self._flush_due = True
        asyncio.get_running_loop().call_soon(self._flush)
        self.transport.write(HEADER.pack(len(body), kind, rid) + body)

    def _flush(self) -> None:
        self._flush_due = False
        if self._out and not self.closed:
            out, self._out = self._out, []
            self.transport.write(b"".join(out))

    def close(self) -> None:
        if self.transport is not None:
            self._flush()
            self.transport.close()


def tune_socket(sock: socket.socket) -> None:
    """Larger kernel buffers on a channel socket, where the system allows them."""
    for opt in (socket.SO_SNDBUF, socket.SO_RCVBUF):
        try:
            sock.setsockopt(socket.SOL_SOCKET, opt, SOCKET_BUFFER_BYTES)
        except OSError:
            pass
