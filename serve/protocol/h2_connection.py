"""One HTTP/2 connection of the gRPC front end (serve/protocol/grpc_h2.py): frames in, header blocks decoded
and checked, stream states, and the connection's and streams' errors.

Frames are read straight from the transport's buffer (DATA through a memoryview, copied once into its
stream); a header block made only of indexed fields (what a gRPC client sends from its second call on) is
decoded and checked once per connection and then served from a cache with its verdict. What a client may
not send is answered with the RFC's connection error (GOAWAY) or stream error (RST_STREAM), the rules
themselves in serve/protocol/h2_rules.py; the flow control both ways is serve/protocol/h2_flow.py's. A
complete call is handed to the server (serve_unary / serve_stream), which answers through `send`.
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

from trainserve.serve.protocol import h2_rules as rules
from trainserve.serve.protocol.grpc_guard import STREAM as STREAM_INFER
from trainserve.serve.protocol.grpc_wire import HEAD, RESPONSE_HEADERS, SERVICE, frame, status_trailers, timeout_s
from trainserve.serve.protocol.h2_flow import DEFAULT_WINDOW, OUT_BACKLOG, RECV_WINDOW, FlowControl, H2Stream
from trainserve.serve.protocol.h2_rules import (
    ACK, COMPRESSION_ERROR, CONTINUATION, DATA, END_HEADERS, END_STREAM, ENHANCE_YOUR_CALM, FLOW_CONTROL_ERROR,
    FRAME_SIZE_ERROR, GOAWAY, HEADERS, MAX_WINDOW, NO_ERROR, PADDED, PING, PRIORITY, PRIORITY_FLAG, PROTOCOL_ERROR,
    PUSH_PROMISE, REFUSED_STREAM, RST_STREAM, S_HEADER_TABLE_SIZE, S_INITIAL_WINDOW_SIZE, S_MAX_CONCURRENT_STREAMS,
    S_MAX_FRAME_SIZE, S_MAX_HEADER_LIST_SIZE, SETTINGS, STREAM_CLOSED, WINDOW_UPDATE, H2Error)

log = logging.getLogger(__name__)

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

MAX_FRAME = 1 << 20  # the largest frame the server takes (advertised); fewer frames per large request
MAX_HEADER_BLOCK = 64 << 10  # a header block larger than this (HEADERS and CONTINUATIONs) ends the connection
MAX_HEADER_LIST = 64 << 10  # a decoded header list (RFC 9113's measure, advertised) past this ends the connection
MAX_CONTINUATIONS = 32  # CONTINUATION frames in one header block past which the connection is ended
MAX_STREAMS = 1024  # calls open at once on one connection (advertised); one more is refused (REFUSED_STREAM)
CONTROL_BACKLOG = 1 << 20  # unread bytes queued for a client past which its PING / SETTINGS end the connection
RESET_BURST = 200  # calls a client may cancel at once (RST_STREAM of a call still open) ...
RESET_RATE = 100.0  # ... and per second after that, before the connection is ended as a rapid-reset flood
RECENT_CLOSED = 2 * 1024  # closed streams remembered per connection, to tell their late frames from a client's errors

_HIGH_BYTES = bytes(range(128, 256))


class H2Connection(FlowControl, asyncio.Protocol):
    """One client connection: HTTP/2 frames in, gRPC calls dispatched, frames out."""

    def __init__(self, server: Any) -> None:  # the H2GrpcServer of serve/protocol/grpc_h2.py
        self.server = server
        self.transport: asyncio.Transport | None = None
        self.buf = bytearray()
        self.preface = False
        self.streams: dict[int, H2Stream] = {}
        self.last_stream = 0
        self.decoder = Decoder(max_header_list_size=MAX_HEADER_LIST)
        self.block_cache: dict[bytes, tuple[list[tuple[bytes, bytes]], str, int]] = {}  # block -> _decode's answer
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
            self.server.guard.refusals.add("grpc", "streams", warning="refused {n} gRPC call(s) past the "
                                           f"{MAX_STREAMS} streams one connection may hold open (REFUSED_STREAM)")
            raise H2Error(REFUSED_STREAM, f"more than {MAX_STREAMS} streams at once", stream_id)
        path = ""
        stream = H2Stream(stream_id, "", self.peer_window, length)
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


    def _end_of_messages(self, stream: H2Stream) -> None:
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


    # --- a stream's end ----------------------------------------------------------------------------------
    def _answer_status(self, stream: H2Stream, code: grpc.StatusCode, message: str) -> None:
        """A trailers-only reply: the call ends with `code` at once; what the client still sends on it is dropped.
        The stream is reset after it when the client has not finished sending, so that it stops."""
        unfinished = not stream.ended
        if not stream.closed and self.transport is not None and not self.transport.is_closing():
            self.transport.write(frame(HEADERS, END_HEADERS | END_STREAM, stream.id,
                                        RESPONSE_HEADERS + status_trailers(code, message)))
            if unfinished:
                self.transport.write(frame(RST_STREAM, 0, stream.id, NO_ERROR.to_bytes(4, "big")))
        self._finished(stream)

    def _finished(self, stream: H2Stream) -> None:
        stream.pending.clear()
        stream.unsent = 0
        self._forget(stream, cancel=False)

    def leave(self, stream: H2Stream) -> None:
        """The call no longer counts against the connection cap (it ended, or only its reply waits to be sent)."""
        if stream.admitted:
            stream.admitted = False
            self.server.guard.leave(self.key)

    def _forget(self, stream: H2Stream, cancel: bool) -> None:
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
