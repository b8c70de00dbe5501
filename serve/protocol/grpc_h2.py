"""The KServe v2 gRPC front end on this project's own HTTP/2 framing: the default gRPC server.

Why not grpc.aio: its per-call work (an accept, three tasks, four completion-queue events each handed from
grpc's poller thread over a socket) cost more server CPU per request than the whole HTTP path including the
model (docs/BENCHMARKS.md, "gRPC against HTTP on one embedded server"), on the one GIL the batcher also
needs. A gRPC call is a few HTTP/2 frames: HEADERS, DATA holding length-prefixed protobuf messages, and
trailers with grpc-status. This module reads and writes those frames itself on an asyncio protocol, as
serve/protocol/http_fast.py does for HTTP/1.1, and hands each decoded message to the same servicer
(serve/protocol/grpc_server.py's InferenceServicer), so every method, status code and message is the grpc.aio
server's. `TRAINSERVE_SERVE_GRPC=aio` serves through grpc.aio instead (for measurements and as a fallback).

What it implements of HTTP/2 (RFC 9113) and gRPC over it:
- the connection preface, SETTINGS (and their ACK), PING (answered), WINDOW_UPDATE both ways, RST_STREAM,
  GOAWAY, CONTINUATION, padding; PRIORITY is ignored; HPACK via the `hpack` package (Huffman and the dynamic
  table), with a header block made only of indexed fields (what a gRPC client sends from its second call on)
  decoded and validated once per connection. What a client may not send (serve/protocol/h2_rules.py: control frames'
  streams and lengths, SETTINGS ranges, window arithmetic, padding, idle and closed streams, malformed request
  headers) is answered with the RFC's connection error (GOAWAY) or stream error (RST_STREAM);
- flow control, credited as the server consumes, so that one connection holds a bounded amount of memory:
  the client may send RECV_WINDOW (16 MiB) per stream and per connection ahead of the server's credit, and
  no more (FLOW_CONTROL_ERROR), given back (WINDOW_UPDATE) half a window at a time and only while at most half
  a window of complete messages waits to be taken, on the stream (ModelStreamInfer's requests the servicer has
  not taken) and on the connection (those of all its streams, and unary messages waiting for their
  END_STREAM). All request bytes a connection holds, messages still arriving and complete ones waiting, are
  bounded by its budget (the larger of PARTIAL_FLOOR, 256 MiB, and 4 messages at the limit): the call whose
  DATA would pass it is answered RESOURCE_EXHAUSTED and counted as a refusal (`memory`), and the connection
  goes on. A header block costs at most MAX_HEADER_BLOCK bytes in at most MAX_CONTINUATIONS CONTINUATION
  frames (checked from the frame headers, before buffering) and two table-size updates at its start, and
  decodes to at most MAX_HEADER_LIST (advertised as SETTINGS_MAX_HEADER_LIST_SIZE). A request's content-length,
  when it has one, must be what its DATA adds up to (RST_STREAM PROTOCOL_ERROR past it or short of it).
  ModelStreamInfer takes no further request while more than OUT_BACKLOG bytes of its replies wait for the
  client's windows, or while the connection's socket holds that much unread, so a client that never reads its answers ends up stopped by flow control instead of growing
  the server's memory. A unary call's second message is answered UNIMPLEMENTED at once. Replies wait for
  the client's windows for at most --body-timeout-s, then their stream is reset (CANCEL) and counted as a
  refusal (`reply_timeout`);
- unary methods and the bidirectional ModelStreamInfer; gzip and deflate request messages (grpc-encoding),
  inflated up to the message limit; grpc-timeout as the call's deadline;
- the body deadline and the connection cap of serve/protocol/grpc_guard.py: a unary call whose message has not
  arrived within --body-timeout-s answers DEADLINE_EXCEEDED; a call on one more connection than
  --max-connections with calls in flight (a reply only waiting for the client's window is not one) answers
  UNAVAILABLE; both counted as refusals;
- three floods end the connection with GOAWAY ENHANCE_YOUR_CALM, counted as refusals (`flood`): a header
  block past its bounds, PINGs or
  SETTINGS sent while more than CONTROL_BACKLOG bytes of the server's answers wait unread (each would queue
  one more answer), and calls cancelled by the client (RST_STREAM) faster than RESET_RATE per second beyond a
  burst of RESET_BURST (the "rapid reset" pattern: each cancelled call may already have reached the model,
  so without a bound a client could make the server work without limit under the stream cap).
No TLS (the server listens on plain TCP, as the grpc.aio server did) and no server push.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import struct
import time
from typing import Any

import grpc
from hpack import Decoder
from hpack.exceptions import HPACKError
from tritonclient.grpc import service_pb2 as pb

from trainserve.serve.protocol import h2_rules as rules, refusals
from trainserve.serve.protocol.grpc_wire import (
    HEAD, MESSAGE, OK_TRAILERS, RESPONSE_HEADERS, SERVICE, Aborted, complete_messages, frame, inflate, status_trailers,
    timeout_s, too_many)
from trainserve.serve.protocol.h2_rules import (
    ACK, CANCEL, COMPRESSION_ERROR, CONTINUATION, DATA, END_HEADERS, END_STREAM, ENHANCE_YOUR_CALM, FLOW_CONTROL_ERROR,
    FRAME_SIZE_ERROR, GOAWAY, HEADERS, MAX_WINDOW, NO_ERROR, PADDED, PING, PRIORITY, PRIORITY_FLAG, PROTOCOL_ERROR,
    PUSH_PROMISE, REFUSED_STREAM, RST_STREAM, S_HEADER_TABLE_SIZE, S_INITIAL_WINDOW_SIZE, S_MAX_CONCURRENT_STREAMS,
    S_MAX_FRAME_SIZE, S_MAX_HEADER_LIST_SIZE, SETTINGS, STREAM_CLOSED, WINDOW_UPDATE, H2Error)
from trainserve.serve.request_errors import RequestTimeout, TooManyConnections
from trainserve.serve.protocol.grpc_guard import STREAM as STREAM_INFER, CallGuard
from trainserve.core import envs
from trainserve.core.errors import UserError
from trainserve.serve.protocol.grpc_server import GrpcConfig, GrpcServer, InferenceServicer, Malformed, _status

log = logging.getLogger(__name__)

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

RECV_WINDOW = 1 << 24  # bytes a client may send ahead of what the server has read, per stream and per connection
MAX_FRAME = 1 << 20  # the largest frame the server takes (advertised); fewer frames per large request
DEFAULT_WINDOW = 65_535  # HTTP/2's initial flow-control window, until the client's SETTINGS say otherwise
MAX_HEADER_BLOCK = 64 << 10  # a header block larger than this (HEADERS and CONTINUATIONs) ends the connection
MAX_HEADER_LIST = 64 << 10  # a decoded header list larger than this (RFC 9113's measure, advertised) ends the connection
MAX_CONTINUATIONS = 32  # CONTINUATION frames in one header block past which the connection is ended
MAX_STREAMS = 1024  # calls open at once on one connection (advertised); one more is refused (REFUSED_STREAM)
CONTROL_BACKLOG = 1 << 20  # unread bytes queued for a client past which its PING / SETTINGS end the connection
RESET_BURST = 200  # calls a client may cancel at once (RST_STREAM of a call still open) ...
RESET_RATE = 100.0  # ... and per second after that, before the connection is ended as a rapid-reset flood
OUT_BACKLOG = 1 << 20  # bytes of a ModelStreamInfer stream's unsent replies past which it takes no more requests
PARTIAL_FLOOR = 256 << 20  # bytes of request messages one connection may hold: this, or 4 messages at the limit
RECENT_CLOSED = 2 * 1024  # closed streams remembered per connection, to tell their late frames from a client's errors

_HIGH_BYTES = bytes(range(128, 256))


class _Context:
    """The few ServicerContext calls InferenceServicer makes."""

    __slots__ = ("_peer",)

    def __init__(self, peer: str) -> None:
        self._peer = peer

    async def abort(self, code: grpc.StatusCode, details: str = "") -> None:
        raise Aborted(code, details)

    def peer(self) -> str:
        return self._peer

    def invocation_metadata(self) -> tuple:
        return ()


class _Stream:
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


class _Connection(asyncio.Protocol):
    """One client connection: HTTP/2 frames in, gRPC calls dispatched, frames out."""

    def __init__(self, server: H2GrpcServer) -> None:
        self.server = server
        self.transport: asyncio.Transport | None = None
        self.buf = bytearray()
        self.preface = False
        self.streams: dict[int, _Stream] = {}
        self.last_stream = 0
        self.decoder = Decoder(max_header_list_size=MAX_HEADER_LIST)
        self.block_cache: dict[bytes, list[tuple[bytes, bytes]]] = {}
        self.header_block: bytearray | None = None  # a header block waiting for its CONTINUATION frames
        self.header_stream = 0
        self.header_flags = 0
        self.header_frames = 0  # CONTINUATION frames of the header block so far
        self.closed_ids: dict[int, bool] = {}  # recently closed stream -> whether the client may still send on it
        self.peer_window = DEFAULT_WINDOW  # the client's initial window for each stream
        self.peer_frame = 16_384  # the largest frame the client takes
        self.send_window = DEFAULT_WINDOW  # connection-level window for what the server sends
        self.recv_unacked = 0  # bytes received since the connection's last WINDOW_UPDATE
        self.queued = 0  # the streams' `queued`, summed: withholds the connection's WINDOW_UPDATE past half a window
        self.partial = 0  # bytes held in incomplete messages (the streams' `data`, summed), at most partial_budget
        self.partial_budget = server.partial_budget
        self.write_paused = False  # the transport holds more than OUT_BACKLOG unsent bytes (the client reads slowly)
        self.peer = ""
        self.key = str(id(self))  # the guard counts this connection's calls in flight under it
        self.going_away = False
        self.reset_tokens = float(RESET_BURST)  # client cancellations of open calls still allowed (token bucket)
        self.reset_at = time.monotonic()

    # --- transport ---------------------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        sock = transport.get_extra_info("socket")
        if sock is not None:
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                pass
        peer = transport.get_extra_info("peername")
        self.peer = f"ipv4:{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        self.transport.set_write_buffer_limits(high=OUT_BACKLOG)  # pause_writing past it
        self.server.connections.add(self)
        settings = struct.pack(">HLHLHLHLHL", S_INITIAL_WINDOW_SIZE, RECV_WINDOW, S_MAX_FRAME_SIZE, MAX_FRAME,
                               S_HEADER_TABLE_SIZE, 4096, S_MAX_CONCURRENT_STREAMS, MAX_STREAMS,
                               S_MAX_HEADER_LIST_SIZE, MAX_HEADER_LIST)
        self.transport.write(frame(SETTINGS, 0, 0, settings)
                             + frame(WINDOW_UPDATE, 0, 0, (RECV_WINDOW - DEFAULT_WINDOW).to_bytes(4, "big")))

    def connection_lost(self, exc: Exception | None) -> None:
        self.server.connections.discard(self)
        for stream in list(self.streams.values()):
            self._forget(stream, cancel=True)
        self.streams.clear()
        self.buf = bytearray()

    def pause_writing(self) -> None:
        self.write_paused = True

    def resume_writing(self) -> None:
        self.write_paused = False
        for stream in self.streams.values():
            if stream.waiter is not None and stream.unsent <= OUT_BACKLOG:
                self._wake(stream)

    def _abandon(self, code: int, why: str, abort: bool = False) -> None:
        """A connection error: GOAWAY with `code`, then close (`abort`: at once, dropping what is unsent)."""
        if self.transport is not None and not self.transport.is_closing():
            log.debug("gRPC connection %s closed: %s", self.peer, why)
            self.transport.write(frame(GOAWAY, 0, 0, struct.pack(">LL", self.last_stream, code) + why.encode()[:200]))
            self.transport.abort() if abort else self.transport.close()

    def _flood(self, why: str, abort: bool = False) -> None:
        """End a connection that floods the server (ENHANCE_YOUR_CALM), counted and logged as a refusal."""
        self.server.guard.refusals.add("grpc", "flood", warning="ended {n} gRPC connection(s) for a flood, the "
                                       f"last {self.peer}: {why}")
        self._abandon(ENHANCE_YOUR_CALM, why, abort)

    def _backlogged(self) -> bool:
        """Whether the client leaves more than CONTROL_BACKLOG bytes of answers unread (then the connection is
        ended rather than one more answer queued)."""
        assert self.transport is not None
        if self.transport.get_write_buffer_size() <= CONTROL_BACKLOG:
            return False
        self._flood(f"control frames sent while more than {CONTROL_BACKLOG} bytes of answers lay unread", abort=True)
        return True

    # --- frames in ---------------------------------------------------------------------------------------
    def data_received(self, data: bytes) -> None:
        buf = self.buf
        buf += data
        pos = 0
        if not self.preface:
            if len(buf) < 33:  # the preface, and the header of the client's first frame (SETTINGS, RFC 9113 §3.4)
                if not PREFACE.startswith(bytes(buf[:24])):
                    self._abandon(PROTOCOL_ERROR, "not an HTTP/2 connection preface")
                return
            if buf[:24] != PREFACE or buf[27] != SETTINGS:
                self._abandon(PROTOCOL_ERROR, "not an HTTP/2 connection preface" if buf[:24] != PREFACE
                              else "the connection preface was not followed by SETTINGS")
                return
            self.preface = True
            pos = 24
        end = len(buf)
        view = memoryview(buf)  # DATA payloads are read through it: copied once, into their stream
        try:
            while end - pos >= 9:
                hi, lo, kind, flags, stream_id = HEAD.unpack_from(buf, pos)
                length = (hi << 16) | lo
                if length > MAX_HEADER_BLOCK and (length > MAX_FRAME or kind == HEADERS or kind == CONTINUATION):
                    if length > MAX_FRAME:
                        self._abandon(FRAME_SIZE_ERROR, f"a frame of {length} bytes exceeds {MAX_FRAME}")
                    else:  # refused from its frame header, before a byte of it is buffered or decoded
                        self._flood(f"a header block of {length} bytes, more than {MAX_HEADER_BLOCK}")
                    return
                if end - pos - 9 < length:
                    break
                start, pos = pos + 9, pos + 9 + length
                try:
                    if kind == DATA and self.header_block is None:
                        self._data(flags, stream_id & 0x7FFFFFFF, view[start:pos])
                    else:
                        self._frame_in(kind, flags, stream_id & 0x7FFFFFFF, bytes(view[start:pos]))
                except H2Error as error:
                    if not error.stream:
                        self._abandon(error.code, error.why)
                        return
                    self._reset(error.stream, error.code, error.why)
                if self.transport is None or self.transport.is_closing():
                    return
        finally:
            view.release()  # no slice of it outlives _data (each is copied there), so the buffer may shrink
            if pos:
                del buf[:pos]

    def _frame_in(self, kind: int, flags: int, stream_id: int, payload: bytes) -> None:
        if self.header_block is not None and kind != CONTINUATION:
            raise H2Error(PROTOCOL_ERROR, "a header block was interrupted")
        if kind == HEADERS:
            self._headers(flags, stream_id, payload)
        elif kind == CONTINUATION:
            if self.header_block is None or stream_id != self.header_stream:
                raise H2Error(PROTOCOL_ERROR, "CONTINUATION without a header block")
            self.header_block += payload
            self.header_frames += 1
            if len(self.header_block) > MAX_HEADER_BLOCK or self.header_frames > MAX_CONTINUATIONS:
                self._flood(f"a header block of more than {MAX_HEADER_BLOCK} bytes or {MAX_CONTINUATIONS} "
                            "CONTINUATION frames")
                return
            if flags & END_HEADERS:
                block, self.header_block = bytes(self.header_block), None
                self._header_block(self.header_stream, self.header_flags, block)
        else:
            rules.check_control(kind, flags, stream_id, len(payload))
            if kind == SETTINGS:
                if not flags & ACK and not self._backlogged():
                    self._settings(payload)
            elif kind == WINDOW_UPDATE:
                self._window_update(stream_id, payload)
            elif kind == PING:
                if not flags & ACK and self.transport is not None and not self._backlogged():
                    self.transport.write(frame(PING, ACK, 0, payload))
            elif kind == RST_STREAM:
                if stream_id > self.last_stream:
                    raise H2Error(PROTOCOL_ERROR, f"RST_STREAM on idle stream {stream_id}")
                if (stream := self.streams.get(stream_id)) is not None:
                    stream.ended = True  # closed by the client: what it sends on it later is an error
                    self._forget(stream, cancel=True)
                    self._cancelled_by_client()
            elif kind == PRIORITY:  # otherwise ignored: RFC 9113 deprecates its scheme
                if int.from_bytes(payload[:4], "big") & 0x7FFFFFFF == stream_id:
                    raise H2Error(PROTOCOL_ERROR, f"stream {stream_id} depends on itself", stream_id)
            elif kind == GOAWAY:
                self.going_away = True
            elif kind == PUSH_PROMISE:
                raise H2Error(PROTOCOL_ERROR, "a client may not push")
        # unknown frame types are ignored, as HTTP/2 asks

    def _cancelled_by_client(self) -> None:
        """One open call cancelled by the client: a token of the reset bucket spent, the connection ended as a
        rapid-reset flood once none is left."""
        now = time.monotonic()
        self.reset_tokens = min(RESET_BURST, self.reset_tokens + (now - self.reset_at) * RESET_RATE) - 1
        self.reset_at = now
        if self.reset_tokens < 0:
            self._flood(f"more than {RESET_BURST} calls cancelled at once, or more than {RESET_RATE:g} per second "
                        "after them (RST_STREAM)")

    def _settings(self, payload: bytes) -> None:
        for ident, value in rules.settings(payload):
            if ident == S_INITIAL_WINDOW_SIZE:
                delta, self.peer_window = value - self.peer_window, value
                for stream in self.streams.values():
                    stream.send_window += delta
                    if stream.send_window > MAX_WINDOW:
                        raise H2Error(FLOW_CONTROL_ERROR, f"SETTINGS_INITIAL_WINDOW_SIZE={value} takes stream "
                                                          f"{stream.id}'s window past 2^31-1")
            elif ident == S_MAX_FRAME_SIZE:
                self.peer_frame = value
        assert self.transport is not None
        self.transport.write(frame(SETTINGS, ACK, 0))
        self._flush_all()

    def _window_update(self, stream_id: int, payload: bytes) -> None:
        increment = int.from_bytes(payload, "big") & 0x7FFFFFFF
        if stream_id == 0:
            if not increment:
                raise H2Error(PROTOCOL_ERROR, "a WINDOW_UPDATE of 0 on the connection")
            self.send_window += increment
            if self.send_window > MAX_WINDOW:
                raise H2Error(FLOW_CONTROL_ERROR, "the connection's window past 2^31-1")
            self._flush_all()
        elif (stream := self.streams.get(stream_id)) is not None:
            if not increment:
                raise H2Error(PROTOCOL_ERROR, "a WINDOW_UPDATE of 0", stream_id)
            stream.send_window += increment
            if stream.send_window > MAX_WINDOW:
                raise H2Error(FLOW_CONTROL_ERROR, "the stream's window past 2^31-1", stream_id)
            self._flush(stream)
        elif stream_id > self.last_stream:
            raise H2Error(PROTOCOL_ERROR, f"WINDOW_UPDATE on idle stream {stream_id}")
        # else for a stream already closed, which a client may still credit: ignored

    def _headers(self, flags: int, stream_id: int, payload: bytes) -> None:
        if flags & PADDED:
            payload = rules.unpad(payload)  # type: ignore[assignment]
        if flags & PRIORITY_FLAG:
            if len(payload) < 5:
                raise H2Error(FRAME_SIZE_ERROR, "HEADERS too short for its priority fields")
            if int.from_bytes(payload[:4], "big") & 0x7FFFFFFF == stream_id:  # a connection error: the block is
                raise H2Error(PROTOCOL_ERROR, f"stream {stream_id} depends on itself")  # left undecoded
            payload = payload[5:]
        if not flags & END_HEADERS:
            self.header_block, self.header_stream, self.header_flags = bytearray(payload), stream_id, flags
            self.header_frames = 0
            return
        self._header_block(stream_id, flags, payload)

    def _decode(self, block: bytes) -> tuple[list[tuple[bytes, bytes]], str, int]:
        """The block's header fields, why they are not a well-formed request ('' when they are), and its
        content-length (-1: none). A block of one-byte indexed fields alone (a repeated call's) changes no table,
        so the same bytes decode to the same fields and verdict until a block that does (which clears the
        cache): a repeated call pays for neither check again."""
        indexed_only = block and not block.translate(None, _HIGH_BYTES)
        if indexed_only and (decoded := self.block_cache.get(block)) is not None:
            return decoded
        if not indexed_only:
            self.block_cache.clear()
            rules.check_size_updates(block)
        try:
            fields = self.decoder.decode(block, raw=True)
        except (HPACKError, ValueError, IndexError) as error:
            raise H2Error(COMPRESSION_ERROR, f"header block cannot be decoded: {error}") from None
        problem = rules.request_problem(fields)
        decoded = (fields, problem, -1 if problem else rules.content_length(fields))
        if indexed_only and len(self.block_cache) < 64:
            self.block_cache[block] = decoded
        return decoded

    def _header_block(self, stream_id: int, flags: int, block: bytes) -> None:
        fields, problem, length = self._decode(block)  # first, whatever follows: the decoding table is the connection's
        stream = self.streams.get(stream_id)
        if stream is not None:  # trailers from the client: the end of its messages
            if stream.ended:
                raise H2Error(STREAM_CLOSED, "HEADERS after the stream's END_STREAM", stream_id)
            if not flags & END_STREAM:
                raise H2Error(PROTOCOL_ERROR, "trailers without END_STREAM", stream_id)
            if why := rules.trailers_problem(fields):
                raise H2Error(PROTOCOL_ERROR, why, stream_id)
            self._end_of_messages(stream)
            return
        if stream_id % 2 == 0:
            raise H2Error(PROTOCOL_ERROR, f"stream id {stream_id} is not a client stream")
        if stream_id <= self.last_stream:
            late_ok = self.closed_ids.get(stream_id)
            if late_ok:
                return  # trailers of a call the server ended while the client was still sending
            if late_ok is None:
                raise H2Error(PROTOCOL_ERROR, f"stream id {stream_id} is not above the last, {self.last_stream}")
            raise H2Error(STREAM_CLOSED, f"HEADERS on stream {stream_id}, already closed")
        self.last_stream = stream_id
        if problem:
            raise H2Error(PROTOCOL_ERROR, f"a malformed request: {problem}", stream_id)
        if len(self.streams) >= MAX_STREAMS:  # past what the SETTINGS allowed: the client may retry it later
            raise H2Error(REFUSED_STREAM, f"more than {MAX_STREAMS} streams at once", stream_id)
        path = ""
        stream = _Stream(stream_id, "", self.peer_window, length)
        for name, value in fields:
            if name == b":path":
                path = value.decode("latin-1")
            elif name == b"grpc-encoding":
                stream.encoding = value
            elif name == b"grpc-timeout" and (timeout := timeout_s(value)) is not None:
                stream.deadline = self.server.loop.time() + timeout  # from when the call began, as the client counts
        stream.path = path
        self.streams[stream_id] = stream
        if self.going_away or self.server.stopping:
            self._answer_status(stream, grpc.StatusCode.UNAVAILABLE, "the server is shutting down")
            return
        if not path.startswith(SERVICE) or path[len(SERVICE):] not in self.server.methods:
            self._answer_status(stream, grpc.StatusCode.UNIMPLEMENTED, f"Method not found: {path}")
            return
        if not self.server.guard_admit(self, stream):
            return
        if path == STREAM_INFER:
            stream.inbox = asyncio.Queue()
            stream.task = asyncio.get_running_loop().create_task(self.server.serve_stream(self, stream))
        else:
            stream.since = self.server.loop.time()
            self.server.waiting[stream] = self
        if flags & END_STREAM:
            self._end_of_messages(stream)

    def _data(self, flags: int, stream_id: int, payload: bytes | memoryview) -> None:
        n = len(payload)
        self.recv_unacked += n
        if self.recv_unacked > RECV_WINDOW:
            raise H2Error(FLOW_CONTROL_ERROR, f"{self.recv_unacked} bytes of DATA where the window was {RECV_WINDOW}")
        stream = self.streams.get(stream_id)
        if stream is not None:
            if stream.ended:
                raise H2Error(STREAM_CLOSED, "DATA after the stream's END_STREAM", stream_id)
            stream.recv_unacked += n
            if stream.recv_unacked > RECV_WINDOW:
                raise H2Error(FLOW_CONTROL_ERROR, f"{stream.recv_unacked} bytes of DATA where the stream's window "
                                                  f"was {RECV_WINDOW}", stream_id)
            if flags & PADDED:
                payload = rules.unpad(payload)
            if stream.expect >= 0:
                stream.expect -= len(payload)
                if stream.expect < 0:
                    raise H2Error(PROTOCOL_ERROR, "DATA past the request's content-length", stream_id)
            if payload:
                if self.partial + self.queued + len(payload) > self.partial_budget:
                    self._refuse_memory(stream)
                else:
                    self.partial += len(payload)
                    if stream.data:
                        stream.data += payload
                    else:
                        stream.data = bytearray(payload)
                    if self._split_messages(stream, flags & END_STREAM) and flags & END_STREAM:
                        self._end_of_messages(stream)
            elif flags & END_STREAM:
                self._end_of_messages(stream)
        else:
            self._data_elsewhere(flags, stream_id, payload)
        half = RECV_WINDOW // 2  # (tested here first: the common frame owes no credit, and calls nothing)
        if self.recv_unacked >= half or (stream is not None and stream.recv_unacked >= half):
            self._credit(stream)

    def _data_elsewhere(self, flags: int, stream_id: int, payload: bytes | memoryview) -> None:
        """DATA on no open stream: an error on stream 0, an idle stream or one the client had closed; dropped on
        one the server ended while the client was still sending (its frames may still be on their way)."""
        if stream_id == 0 or stream_id > self.last_stream:
            raise H2Error(PROTOCOL_ERROR, f"DATA on {'stream 0' if not stream_id else f'idle stream {stream_id}'}")
        if flags & PADDED:
            rules.unpad(payload)
        if self.closed_ids.get(stream_id) is False:
            raise H2Error(STREAM_CLOSED, f"DATA on stream {stream_id}, already closed")

    def _reset(self, stream_id: int, code: int, why: str) -> None:
        """A stream error: RST_STREAM with `code`, the call ended if open; what the client still sends on it is
        dropped."""
        log.debug("gRPC stream %d of %s reset: %s", stream_id, self.peer, why)
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(frame(RST_STREAM, 0, stream_id, code.to_bytes(4, "big")))
        if (stream := self.streams.get(stream_id)) is not None:
            self._forget(stream, cancel=True)
        self._remember_closed(stream_id, True)

    def _remember_closed(self, stream_id: int, late_ok: bool) -> None:
        """Remember a closed stream (the last RECENT_CLOSED): `late_ok`, whether the client may still send on it."""
        closed = self.closed_ids
        closed[stream_id] = late_ok
        if len(closed) > RECENT_CLOSED:
            del closed[next(iter(closed))]

    def _credit(self, stream: _Stream | None) -> None:
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

    def _release(self, stream: _Stream) -> None:
        """The stream's waiting messages no longer count against the connection's window (the call has them, or
        they are dropped): credit what that frees."""
        if stream.queued:
            self.queued -= stream.queued
            stream.queued = 0
            self._credit(None)

    def taken(self, stream: _Stream, message: bytes | memoryview) -> None:
        """The servicer took one of the stream's messages: no longer held against the windows."""
        if not stream.closed:  # else _forget has released it already
            stream.queued -= len(message)
            self.queued -= len(message)
            self._credit(stream)

    def _refuse_memory(self, stream: _Stream) -> None:
        """Answer the call whose DATA would take the connection's incomplete messages past its budget."""
        held = f"{self.partial_budget >> 20} MiB" if self.partial_budget >= 1 << 20 else f"{self.partial_budget} bytes"
        why = (f"this connection holds more than {held} of request messages still arriving; send fewer large "
               "requests at once on one connection")
        self.server.guard.refusals.add("grpc", "memory", warning="refused {n} gRPC call(s) for the memory of "
                                       f"their connection, the last from {self.peer}: {why}")
        self._answer_status(stream, grpc.StatusCode.RESOURCE_EXHAUSTED, why)

    def _split_messages(self, stream: _Stream, ending: int) -> bool:
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

    def _end_of_messages(self, stream: _Stream) -> None:
        if stream.ended or stream.closed:
            return
        if stream.expect > 0:
            raise H2Error(PROTOCOL_ERROR, f"the request ended {stream.expect} bytes short of its content-length",
                          stream.id)
        stream.ended = True
        if stream.inbox is not None:
            stream.inbox.put_nowait(None)
            return
        self.server.waiting.pop(stream, None)
        if stream.data:
            self._answer_status(stream, grpc.StatusCode.INTERNAL, "the call ended inside a message")
            return
        self._release(stream)  # the message is the call's now
        stream.task = self.server.loop.create_task(self.server.serve_unary(self, stream))

    # --- frames out --------------------------------------------------------------------------------------
    def send(self, stream: _Stream, message: bytes | None, trailers: bytes | None, headers: bool) -> None:
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

    def _flush(self, stream: _Stream) -> None:
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
    def _wake(stream: _Stream) -> None:
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

    def _answer_status(self, stream: _Stream, code: grpc.StatusCode, message: str) -> None:
        """A trailers-only reply: the call ends with `code` at once; what the client still sends on it is dropped.
        The stream is reset after it when the client has not finished sending, so that it stops."""
        unfinished = not stream.ended
        if not stream.closed and self.transport is not None and not self.transport.is_closing():
            self.transport.write(frame(HEADERS, END_HEADERS | END_STREAM, stream.id,
                                        RESPONSE_HEADERS + status_trailers(code, message)))
            if unfinished:
                self.transport.write(frame(RST_STREAM, 0, stream.id, NO_ERROR.to_bytes(4, "big")))
        self._finished(stream)

    def _finished(self, stream: _Stream) -> None:
        stream.pending.clear()
        stream.unsent = 0
        self._forget(stream, cancel=False)

    def leave(self, stream: _Stream) -> None:
        """The call no longer counts against the connection cap (it ended, or only its reply waits to be sent)."""
        if stream.admitted:
            stream.admitted = False
            self.server.guard.leave(self.key)

    def _forget(self, stream: _Stream, cancel: bool) -> None:
        stream.closed = True
        self.partial -= len(stream.data)
        stream.data = bytearray()
        stream.messages = []
        self.streams.pop(stream.id, None)
        self._remember_closed(stream.id, not stream.ended)
        self.server.waiting.pop(stream, None)
        if stream.parked_since:
            self.server.parked.pop(stream, None)
        self.leave(stream)
        if cancel and stream.task is not None and not stream.task.done() \
                and stream.task is not asyncio.current_task():
            stream.task.cancel()
        if stream.inbox is not None:  # its requests will not be taken now: the servicer sees the end at once
            while not stream.inbox.empty():
                stream.inbox.get_nowait()
            stream.inbox.put_nowait(None)
        self._wake(stream)
        self._release(stream)
        self.server.idle_check()


class H2GrpcServer:
    """The gRPC endpoint on this module's HTTP/2: `await start()`, then `await stop()` (GrpcServer's interface)."""

    name = "grpc"

    def __init__(self, core: Any, config: GrpcConfig | None = None) -> None:
        self.core = core
        self.config = config or GrpcConfig()
        self.servicer = InferenceServicer(core)
        self.guard = CallGuard(self.config.max_connections, self.config.body_timeout_s, refusals.of(core))
        self.connections: set[_Connection] = set()
        self.waiting: dict[_Stream, _Connection] = {}  # unary calls whose message has not all arrived
        self.parked: dict[_Stream, _Connection] = {}  # streams whose replies wait for the client's windows
        self.partial_budget = max(PARTIAL_FLOOR, 4 * self.config.max_message_bytes)  # bytes per connection
        self.methods = {m.name: m for m in pb.DESCRIPTOR.services_by_name["GRPCInferenceService"].methods}
        self._request_types = {name: m.input_type._concrete_class for name, m in self.methods.items()}
        self._server: asyncio.base_events.Server | None = None
        self._sweeper: asyncio.Task | None = None
        self.port: int | None = None
        self.stopping = False
        self._idle: asyncio.Event | None = None
        self.loop: asyncio.AbstractEventLoop = None  # type: ignore[assignment]

    async def start(self) -> int:
        """Bind and serve; returns the bound port (the OS's choice for port 0)."""
        self.loop = asyncio.get_running_loop()
        self._idle = asyncio.Event()
        try:
            self._server = await self.loop.create_server(
                lambda: _Connection(self), self.config.host, self.config.port, backlog=1024,
                reuse_port=self.config.reuse_port or None)
        except OSError as error:
            raise OSError(error.errno, f"cannot listen for gRPC on {self.config.host}:{self.config.port}: "
                                       f"{error.strerror or error}") from None
        self.port = self._server.sockets[0].getsockname()[1]
        self._sweeper = self.loop.create_task(self._sweep())
        log.info("gRPC on %s:%d", self.config.host, self.port)
        return self.port

    # --- the guard ---------------------------------------------------------------------------------------
    def guard_admit(self, conn: _Connection, stream: _Stream) -> bool:
        """Count the call on its connection; refuse it (UNAVAILABLE) when its connection is one more than the cap."""
        if not self.guard.admit(conn.key):
            conn._answer_status(stream, *_status(TooManyConnections(self.guard.max_connections)))
            return False
        stream.admitted = True
        return True

    async def _sweep(self) -> None:
        """Forever: end the unary calls whose message has not all arrived within the body deadline, and reset
        the streams whose replies waited that long for the client's windows (a client that never reads would
        otherwise hold them, and their memory, for as long as it stays connected)."""
        timeout = self.config.body_timeout_s
        every = max(0.05, timeout / 4)
        while True:
            await asyncio.sleep(every)
            late = self.loop.time() - timeout
            for stream, conn in list(self.waiting.items()):
                if stream.since < late:
                    self.guard.refusals.add("grpc", "body_timeout")
                    conn._answer_status(stream, *_status(RequestTimeout(timeout)))
            for stream, conn in list(self.parked.items()):
                if stream.parked_since < late and not stream.closed:
                    why = f"its reply waited more than {timeout:g} s for the client's window"
                    self.guard.refusals.add("grpc", "reply_timeout", warning="reset {n} gRPC call(s) whose reply "
                                            f"the client left unread, the last on {conn.peer}: {why}")
                    conn._reset(stream.id, CANCEL, why)

    # --- calls -------------------------------------------------------------------------------------------
    def _parse(self, method: str, message: bytes) -> Any:
        try:
            return self._request_types[method].FromString(message)
        except Exception as error:  # protobuf's DecodeError, or anything a corrupt message provokes
            return Malformed(f"failed to parse the request message: {error}")

    async def serve_unary(self, conn: _Connection, stream: _Stream) -> None:
        method = stream.path[len(SERVICE):]
        timer = None
        try:
            if stream.deadline is not None:
                if stream.deadline <= self.loop.time():  # passed while the message arrived: not run at all
                    raise Aborted(grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded")
                timer = self.loop.call_at(stream.deadline, stream.task.cancel)  # type: ignore[union-attr]
            if len(stream.messages) != 1:  # more than one is answered as it arrives (_split_messages)
                raise Aborted(grpc.StatusCode.INVALID_ARGUMENT if not stream.messages else grpc.StatusCode.UNIMPLEMENTED,
                              f"the {method} call carried no request message" if not stream.messages
                              else too_many(stream.path, len(stream.messages)))
            request = self._parse(method, stream.messages.pop())
            if isinstance(request, Malformed):
                raise Aborted(grpc.StatusCode.INVALID_ARGUMENT, request.message)
            if method == "ModelInfer":
                response = await self.servicer._infer(request)
            else:
                response = await getattr(self.servicer, method)(request, _Context(conn.peer))
            del request
            conn.send(stream, response.SerializeToString(), OK_TRAILERS, headers=True)
        except Aborted as aborted:
            conn._answer_status(stream, aborted.code, aborted.details)
        except asyncio.CancelledError:
            if stream.closed or conn.transport is None or conn.transport.is_closing():
                return  # reset by the client, or the connection went away
            conn._answer_status(stream, grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded")
        except Exception as error:  # every failure answers the client with a status, never a dropped call
            conn._answer_status(stream, *_status(error))
        finally:
            if timer is not None:
                timer.cancel()
            if not stream.closed and not stream.pending:
                conn._finished(stream)
            else:  # a reply still waiting for the client's window stays, no longer counted as a call in progress
                conn.leave(stream)

    async def serve_stream(self, conn: _Connection, stream: _Stream) -> None:
        inbox = stream.inbox
        assert inbox is not None

        async def requests():
            """The stream's requests, each taken only while its replies do not pile up unsent (OUT_BACKLOG): the
            rest wait in the inbox, and past half a window there the client's window is not credited."""
            while True:
                while (stream.unsent > OUT_BACKLOG or conn.write_paused) and not stream.closed:
                    stream.waiter = self.loop.create_future()
                    await stream.waiter
                if (message := await inbox.get()) is None:
                    return
                conn.taken(stream, message)
                yield self._parse("ModelStreamInfer", message)

        headers_sent = False
        responses = self.servicer.ModelStreamInfer(requests(), _Context(conn.peer))
        try:
            async for response in responses:
                conn.send(stream, response.SerializeToString(), None, headers=not headers_sent)
                headers_sent = True
            if headers_sent:
                conn.send(stream, None, OK_TRAILERS, headers=False)
            else:
                conn._answer_status(stream, grpc.StatusCode.OK, "")
        except asyncio.CancelledError:
            pass  # the client reset the stream or went away
        except Exception as error:
            code, message = _status(error)
            if headers_sent:
                conn.send(stream, None, status_trailers(code, message), headers=False)
            else:
                conn._answer_status(stream, code, message)
        finally:
            await responses.aclose()
            if not stream.closed and not stream.pending:
                conn._finished(stream)
            else:  # a reply still waiting for the client's window stays, no longer counted as a call in progress
                conn.leave(stream)

    # --- stop --------------------------------------------------------------------------------------------
    def idle_check(self) -> None:
        if self.stopping and self._idle is not None and not any(c.streams for c in self.connections):
            self._idle.set()

    async def stop(self, grace_s: float | None = None) -> None:
        """Refuse new calls (GOAWAY) and let those in flight finish for up to grace_s (default: the config's)."""
        if self._sweeper is not None:
            self._sweeper.cancel()
        if self._server is None:
            return
        self.stopping = True
        self._server.close()
        for conn in list(self.connections):
            if conn.transport is not None and not conn.transport.is_closing():
                conn.transport.write(frame(GOAWAY, 0, 0, struct.pack(">LL", conn.last_stream, NO_ERROR)))
        self.servicer.drain_streams()
        self.idle_check()
        assert self._idle is not None
        try:
            await asyncio.wait_for(self._idle.wait(), self.config.grace_s if grace_s is None else grace_s)
        except asyncio.TimeoutError:
            pass
        for conn in list(self.connections):
            if conn.transport is not None:
                conn.transport.close()
        self._server = None


GRPC_ENV = envs.SERVE_GRPC.name  # "aio": serve gRPC through grpc.aio instead of this module (measurements)


def create_frontend(core: Any, host: str, port: int, options: Any) -> H2GrpcServer | GrpcServer:
    """The hook serve/engine/server.py calls: a gRPC front end with the server's host, port and limits, on this module's
    HTTP/2 unless TRAINSERVE_SERVE_GRPC=aio asks for grpc.aio (serve/protocol/grpc_server.py)."""
    choice = envs.SERVE_GRPC.get().strip().lower() or "h2"
    if choice not in ("h2", "aio"):
        raise UserError(f"{GRPC_ENV}={choice!r} must be 'h2' (the default) or 'aio' (grpc.aio)")
    config = GrpcConfig(host=host, port=port, max_message_bytes=options.max_body_bytes, grace_s=options.drain_timeout_s,
                        reuse_port=options.reuse_port, body_timeout_s=options.body_timeout_s,
                        max_connections=options.max_connections)
    return H2GrpcServer(core, config) if choice == "h2" else GrpcServer(core, config)
