"""The control channel between a front-end process and the model process: framed messages on a Unix socket.

Every message is a 9-byte header, then its body:

    <I body length> <B kind> <I request id>   body: marshal of (VERSION, *fields), or pickle of it for the rare calls

What travels is declared here, one NamedTuple per kind, and encoded and decoded only by `encode` and
`decode`: a field added on one side and not the other fails here, with the kind's name, not far away in
the other process. marshal stays the encoding of the hot kinds: for an INFER message it costs what
pickle does (about 0.5 µs each way), it refuses anything but plain values (no object of ours can slip
onto the wire), and both ends are the same build of this package; the version makes a mismatched peer an
error, not a misread. marshal takes exact tuples only, so a message's tensors (TensorRef) are plain tuples.

The first message of an event-loop turn is written at once; the ones after it in that turn are
queued and written together at the start of the next turn, and the reader takes whatever chunks the
socket gives: a burst of requests, or of a batch's answers, costs two syscalls each way, not one per
message, and a lone request waits for no loop turn. Tensors do not travel here when they fit the shared
arena (serve/engine/shm.py): a TensorRef then holds the arena offset and no data; when a tensor does not fit, or
holds strings, its offset is -1 and it carries its bytes or a tuple of its elements.

Kinds (-> the model process, <- the front end):
    INFER  -> Infer: a request; `requests` > 1 when the front end merged that many clients' requests into
              this one (their rows in order along dim 0; serve/engine/remote_core.py)
    CALL   -> Call: a registry call whose answer changes while serving (statistics)
    READY  -> Ready: the front end listens, on these ports
    OK     <- Answer: the tensors of the answer
    ERROR  <- Failure: a serve.request_errors error by class name, re-raised in the front end
    RESULT <- Result: a CALL's answer (pickle)
    HELLO  <- Hello: the registry snapshot the front end serves metadata from (pickle)
"""

from __future__ import annotations

import asyncio
import marshal
import pickle
import socket
import struct
from collections.abc import Callable
from typing import Any, NamedTuple, NoReturn

import numpy as np

from trainserve.serve import request_errors as errors

HEADER = struct.Struct("<IBI")
INFER, CALL, READY, OK, ERROR, RESULT, HELLO = range(1, 8)
VERSION = 1  # of the messages' fields: raise it with any change to a message below
SOCKET_BUFFER_BYTES = 4 << 20  # kernel buffer each way: a burst of thousands of messages fits, bytes


# A tensor of a message, a plain tuple (marshal takes exact tuples only, and one per tensor per request is
# cheaper to build and read than a NamedTuple): in the sender's arena (offset >= 0, data None) or carried inline
# (offset -1, data its raw bytes or a string tensor's elements). Built by arena_tensor and inline_tensor.
#            name, dtype ("<f4", or "O" for strings), shape, offset in the arena (bytes) or -1, data
TensorRef = tuple[str, str, tuple[int, ...], int, bytes | tuple | None]


class Infer(NamedTuple):
    """INFER: run `model` on `tensors`; the outputs go into the arena at [out_offset, out_offset + out_cap)."""

    model: str
    version: str
    tensors: tuple[TensorRef, ...]
    outputs: tuple[str, ...] | None  # the outputs asked for, None for all
    out_offset: int  # -1: no room reserved, the answer carries its outputs inline
    out_cap: int  # bytes
    requests: int  # clients' requests merged into this one


class Call(NamedTuple):
    """CALL: a registry method by name (only "statistics") and its arguments."""

    method: str
    args: tuple


class Ready(NamedTuple):
    """READY: the front end's listening ports, by protocol ("http", "grpc")."""

    ports: dict[str, int]


class Answer(NamedTuple):
    """OK: the outputs of an INFER."""

    tensors: tuple[TensorRef, ...]


class Failure(NamedTuple):
    """ERROR: a serve.request_errors class name and its message."""

    error: str
    message: str


class Result(NamedTuple):
    """RESULT: a CALL's answer (any picklable value)."""

    value: Any


class Hello(NamedTuple):
    """HELLO: the registry snapshot, sent once before the channel's other messages."""

    snapshot: dict


Message = Infer | Call | Ready | Answer | Failure | Result | Hello
KINDS: dict[type, int] = {Infer: INFER, Call: CALL, Ready: READY, Answer: OK, Failure: ERROR, Result: RESULT,
                          Hello: HELLO}
_PICKLED = (RESULT, HELLO)  # arbitrary values, and rare: pickle; the rest are plain tuples: marshal
_TYPES: dict[int, type] = {kind: cls for cls, kind in KINDS.items()}
_FIELDS = {kind: len(cls._fields) + 1 for kind, cls in _TYPES.items()}  # with the version
_new = tuple.__new__  # a C call: the NamedTuples' own __new__ is Python-level, a third of a microsecond
_dumps, _loads = marshal.dumps, marshal.loads


def encode(message: Message) -> tuple[int, bytes]:
    """(kind, body) of a message."""
    cls = type(message)
    if cls is Infer or cls is Answer:  # one each per request: the short way
        return (INFER if cls is Infer else OK), _dumps((VERSION, *message))
    kind = KINDS[cls]
    return kind, (pickle.dumps if kind in _PICKLED else _dumps)((VERSION, *message))


def decode(kind: int, body: bytes) -> Message:
    """The message of a (kind, body); ValueError for an unknown kind, another version or the wrong fields."""
    if kind == INFER or kind == OK:  # one each per request: the short way
        fields = _loads(body)
        if fields[0] == VERSION and len(fields) == (8 if kind == INFER else 2):
            return _new(Infer if kind == INFER else Answer, fields[1:])
        _refuse(_TYPES[kind], fields)
    size = _FIELDS.get(kind)
    if size is None:
        raise ValueError(f"unknown message kind {kind}")
    fields = (pickle.loads if kind in _PICKLED else _loads)(body)
    if fields[0] != VERSION or len(fields) != size:
        _refuse(_TYPES[kind], fields)
    return _new(_TYPES[kind], fields[1:])


def _refuse(cls: type, fields: tuple) -> NoReturn:
    if fields[0] != VERSION:
        raise ValueError(f"{cls.__name__} message of version {fields[0]!r}; this side reads version {VERSION}")
    raise ValueError(f"{cls.__name__} message with {len(fields) - 1} fields; expected {len(cls._fields)} "
                     f"({', '.join(cls._fields)})")


def arena_tensor(name: str, array: np.ndarray, offset: int) -> TensorRef:
    """A tensor written into the arena at `offset` (bytes)."""
    return name, array.dtype.str, array.shape, offset, None


def inline_tensor(name: str, array: np.ndarray) -> TensorRef:
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


def failure(e: Exception) -> Failure:
    """An error as the ERROR message: a serve.request_errors class travels by name; anything else is Internal."""
    if isinstance(e, errors.ServeError) and type(e).__module__ == errors.__name__:
        return Failure(type(e).__name__, e.message)
    return Failure("Internal", f"internal error: {type(e).__name__}: {e}")


def raise_error(message: Failure) -> errors.ServeError:
    """The ServeError an ERROR message describes (built without its class's own __init__ arguments)."""
    cls = getattr(errors, message.error, errors.Internal)
    if not (isinstance(cls, type) and issubclass(cls, errors.ServeError)):
        cls = errors.Internal
    e = cls.__new__(cls)
    errors.ServeError.__init__(e, message.message)
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

    def send_message(self, rid: int, message: Message) -> None:
        """Encode `message` and send it (as `send`)."""
        kind, body = encode(message)
        self.send(kind, rid, body)

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
