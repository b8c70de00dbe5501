"""HTTP/2 flow control both ways for serve/protocol/h2_connection.py: what a client may send ahead of the
server's credit, what the server holds of it, and replies sent within the client's windows.

Receiving: the client may send RECV_WINDOW per stream and per connection ahead of the server's credit; the
credit (WINDOW_UPDATE) is given back half a window at a time as the servicer *takes* complete messages, so
messages nobody takes stop the client instead of growing the server's memory. Bytes of messages still
arriving are bounded per connection by its budget (the call whose DATA would pass it is answered
RESOURCE_EXHAUSTED). Sending: a reply goes out as far as the connection's and the stream's windows and the
client's frame size allow; the rest waits on its stream (`pending`) until WINDOW_UPDATE or SETTINGS open
them, and a stream whose reply waits is "parked" for the server's sweep (serve/protocol/grpc_h2.py).

FlowControl is a base of H2Connection, not an object it holds: the hot path reads its windows as the
connection's own attributes, with no extra lookup per frame.
"""

from __future__ import annotations

import asyncio
from typing import Any

import grpc

from trainserve.serve.protocol.grpc_wire import (
    HEAD, MESSAGE, RESPONSE_HEADERS, Aborted, complete_messages, frame, inflate, too_many)
from trainserve.serve.protocol.h2_rules import DATA, END_HEADERS, END_STREAM, HEADERS, WINDOW_UPDATE

RECV_WINDOW = 1 << 24  # bytes a client may send ahead of what the server has read, per stream and per connection
DEFAULT_WINDOW = 65_535  # HTTP/2's initial flow-control window, until the client's SETTINGS say otherwise
OUT_BACKLOG = 1 << 20  # bytes of a ModelStreamInfer stream's unsent replies past which it takes no more requests
PARTIAL_FLOOR = 256 << 20  # bytes of request messages one connection may hold: this, or 4 messages at the limit


class H2Stream:
    """One call: what has arrived of its messages, and what waits to be sent on it."""

    __slots__ = ("id", "path", "data", "messages", "ended", "send_window", "pending", "task", "since", "encoding",
                 "deadline", "inbox", "closed", "recv_unacked", "admitted", "queued", "unsent", "waiter",
                 "parked_since", "expect")

    def __init__(self, stream_id: int, path: str, send_window: int, expect: int) -> None:
        self.id = stream_id
        self.path = path
        self.data = bytearray()  # received bytes not yet split into messages
        self.messages: list[bytes | memoryview] = []  # complete messages of a unary call
        self.ended = False  # the client half-closed (END_STREAM)
        self.send_window = send_window
        self.pending: list[tuple[bytes, int, bool]] = []  # (payload, kind, end) waiting for the windows
        self.task: asyncio.Task | None = None
        self.since = 0.0  # loop time the call began waiting for its message (unary), for the body deadline
        self.encoding = b""  # grpc-encoding of its messages
        self.deadline: float | None = None  # loop time by which the call must be answered (grpc-timeout)
        self.inbox: asyncio.Queue | None = None  # ModelStreamInfer: messages for the servicer's iterator
        self.closed = False  # answered (trailers sent) or reset
        self.recv_unacked = 0  # bytes received on the stream since its last WINDOW_UPDATE
        self.admitted = False  # counted in the guard's calls in flight
        self.queued = 0  # bytes of complete messages not yet taken (the inbox's, or a unary call's before END_STREAM)
        self.unsent = 0  # bytes of DATA in `pending`
        self.waiter: asyncio.Future | None = None  # set when `unsent` falls back within OUT_BACKLOG, or the stream ends
        self.parked_since = 0.0  # loop time its reply began waiting for the client's windows (0: it is not)
        self.expect = expect  # bytes of DATA still due by its content-length (-1: it declared none)


class FlowControl:
    """The windows of one connection and its streams: credit for what the client sent, replies within what it
    granted. The attributes below are the connection's (set in H2Connection.__init__)."""

    server: Any  # the H2GrpcServer (serve/protocol/grpc_h2.py): its guard, config, loop and parked streams
    transport: asyncio.Transport | None
    peer: str
    send_window: int  # connection-level window for what the server sends
    peer_frame: int  # the largest frame the client takes
    recv_unacked: int  # bytes received since the connection's last WINDOW_UPDATE
    queued: int  # the streams' `queued`, summed
    partial: int  # bytes held in incomplete messages, at most partial_budget
    partial_budget: int
    write_paused: bool
    streams: dict[int, H2Stream]

    def _answer_status(self, stream: H2Stream, code: grpc.StatusCode, message: str) -> None:
        raise NotImplementedError  # the connection's: a trailers-only reply that ends the call

    def _finished(self, stream: H2Stream) -> None:
        raise NotImplementedError  # the connection's: the stream is answered, forget it

    # --- receiving ---------------------------------------------------------------------------------------
    def _credit(self, stream: H2Stream | None) -> None:
        """WINDOW_UPDATE for what arrived, once half a window of it is owed, while no more than half a window of
        complete messages waits to be taken: on the stream, and on the connection over all its streams."""
        half = RECV_WINDOW // 2
        if stream is not None and stream.recv_unacked >= half and stream.queued <= half and not stream.ended \
                and not stream.closed and self.transport is not None and not self.transport.is_closing():
            self.transport.write(frame(WINDOW_UPDATE, 0, stream.id, stream.recv_unacked.to_bytes(4, "big")))
            stream.recv_unacked = 0
        if self.recv_unacked >= half and self.queued <= half and self.transport is not None \
                and not self.transport.is_closing():
            self.transport.write(frame(WINDOW_UPDATE, 0, 0, self.recv_unacked.to_bytes(4, "big")))
            self.recv_unacked = 0

    def _release(self, stream: H2Stream) -> None:
        """The stream's waiting messages no longer count against the connection's window (the call has them, or
        they are dropped): credit what that frees."""
        if stream.queued:
            self.queued -= stream.queued
            stream.queued = 0
            self._credit(None)

    def taken(self, stream: H2Stream, message: bytes | memoryview) -> None:
        """The servicer took one of the stream's messages: no longer held against the windows."""
        if not stream.closed:  # else _forget has released it already
            stream.queued -= len(message)
            self.queued -= len(message)
            self._credit(stream)

    def _refuse_memory(self, stream: H2Stream) -> None:
        """Answer the call whose DATA would take the connection's incomplete messages past its budget."""
        held = f"{self.partial_budget >> 20} MiB" if self.partial_budget >= 1 << 20 else f"{self.partial_budget} bytes"
        why = (f"this connection holds more than {held} of request messages still arriving; send fewer large "
               "requests at once on one connection")
        self.server.guard.refusals.add("grpc", "memory", warning="refused {n} gRPC call(s) for the memory of "
                                       f"their connection, the last from {self.peer}: {why}")
        self._answer_status(stream, grpc.StatusCode.RESOURCE_EXHAUSTED, why)

    def _split_messages(self, stream: H2Stream, ending: int) -> bool:
        """Move the stream's complete messages out of its data; False when the call was ended (too large, or a
        unary call's second message). `ending`: END_STREAM came with them. `self.partial` drops by what leaves
        `data` (by all of it, in _forget)."""
        data = stream.data
        limit = self.server.config.max_message_bytes
        pos = 0
        while len(data) - pos >= 5:
            compressed, length = MESSAGE.unpack_from(data, pos)
            if length > limit:
                self._answer_status(stream, grpc.StatusCode.RESOURCE_EXHAUSTED,
                                    f"Received message larger than max ({length} vs. {limit})")
                return False
            if len(data) - pos - 5 < length:
                break
            if stream.inbox is None and stream.messages:  # answered now, not held until END_STREAM
                n = len(stream.messages) + complete_messages(data, pos)
                self._answer_status(stream, grpc.StatusCode.UNIMPLEMENTED, too_many(stream.path, n))
                return False
            if pos == 0 and len(data) == 5 + length:  # the whole of what arrived: handed on without a copy
                message: Any = memoryview(data)[5:]
                stream.data = data = bytearray()
                self.partial -= 5 + length
            else:
                message = bytes(memoryview(data)[pos + 5:pos + 5 + length])  # the view is gone before del below
                pos += 5 + length
            if compressed:
                try:
                    message = inflate(stream.encoding, message, limit)
                except Aborted as aborted:
                    self._answer_status(stream, aborted.code, aborted.details)
                    return False
            if stream.inbox is None:
                stream.messages.append(message)
                if ending:
                    continue  # END_STREAM in this frame: the call takes it at once, it never waits
            else:
                stream.inbox.put_nowait(message)
            stream.queued += len(message)
            self.queued += len(message)
        if pos:
            del data[:pos]
            self.partial -= pos
        return True


    # --- sending -----------------------------------------------------------------------------------------
    def send(self, stream: H2Stream, message: bytes | None, trailers: bytes | None, headers: bool) -> None:
        """The reply's headers (when `headers`), one message (when given) and the trailers (when given, ending the
        stream), as far as the client's windows allow now; the rest when they open."""
        if stream.closed or self.transport is None or self.transport.is_closing():
            return
        out = []
        if headers:
            out.append(frame(HEADERS, END_HEADERS, stream.id, RESPONSE_HEADERS))
        if message is not None:
            body = MESSAGE.pack(0, len(message)) + message
            n = len(body)
            if not stream.pending and n <= self.send_window and n <= stream.send_window and n <= self.peer_frame:
                self.send_window -= n
                stream.send_window -= n
                out.append(HEAD.pack(n >> 16, n & 0xFFFF, DATA, 0, stream.id) + body)
            else:
                stream.pending.append((body, DATA, False))
                stream.unsent += n
        if trailers is not None:
            if stream.pending:
                stream.pending.append((trailers, HEADERS, True))
            else:
                out.append(frame(HEADERS, END_HEADERS | END_STREAM, stream.id, trailers))
                self._finished(stream)
        if out:
            self.transport.write(b"".join(out))
        if stream.pending:
            self._flush(stream)

    def _flush(self, stream: H2Stream) -> None:
        """Send what waits on the stream, as far as the windows allow."""
        out = []
        while stream.pending:
            payload, kind, end = stream.pending[0]
            if kind == HEADERS:
                out.append(frame(HEADERS, END_HEADERS | END_STREAM, stream.id, payload))
                stream.pending.pop(0)
                self._finished(stream)
                break
            room = min(self.send_window, stream.send_window, self.peer_frame)
            if room <= 0:
                break
            chunk, rest = payload[:room], payload[room:]
            self.send_window -= len(chunk)
            stream.send_window -= len(chunk)
            stream.unsent -= len(chunk)
            out.append(frame(DATA, 0, stream.id, chunk))
            if rest:
                stream.pending[0] = (rest, kind, end)
            else:
                stream.pending.pop(0)
        if out and self.transport is not None and not self.transport.is_closing():
            self.transport.write(b"".join(out))
        if stream.pending:  # waits for the client's windows: reset if they stay shut past the deadline
            if not stream.parked_since and not stream.closed:
                stream.parked_since = self.server.loop.time()
                self.server.parked[stream] = self
        elif stream.parked_since:
            stream.parked_since = 0.0
            self.server.parked.pop(stream, None)
        if stream.waiter is not None and stream.unsent <= OUT_BACKLOG and not self.write_paused:
            self._wake(stream)

    @staticmethod
    def _wake(stream: H2Stream) -> None:
        """Let the stream's servicer take requests again (its replies drained, or the stream ended)."""
        if stream.waiter is not None:
            if not stream.waiter.done():
                stream.waiter.set_result(None)
            stream.waiter = None

    def _flush_all(self) -> None:
        for stream in list(self.streams.values()):
            if stream.pending:
                self._flush(stream)
                if self.send_window <= 0:
                    break
