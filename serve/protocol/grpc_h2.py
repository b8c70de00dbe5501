"""The KServe v2 gRPC front end on this project's own HTTP/2 framing: the default gRPC server.

Why not grpc.aio: its per-call work (an accept, three tasks, four completion-queue events each handed from
grpc's poller thread over a socket) cost more server CPU per request than the whole HTTP path including the
model (docs/BENCHMARKS.md, "gRPC against HTTP on one embedded server"), on the one GIL the batcher also
needs. A gRPC call is a few HTTP/2 frames: HEADERS, DATA holding length-prefixed protobuf messages, and
trailers with grpc-status. The server reads and writes those frames itself on an asyncio protocol, as
serve/protocol/http_fast.py does for HTTP/1.1, and hands each decoded message to the same servicer
(serve/protocol/grpc_server.py's InferenceServicer), so every method, status code and message is the grpc.aio
server's. This module is the server and its calls (listening, the sweep of late calls and stalled replies,
each call served and answered); one connection's frames, header blocks and stream states are
serve/protocol/h2_connection.py's, its flow control both ways serve/protocol/h2_flow.py's, and what a client
may not send serve/protocol/h2_rules.py's. `TRAINSERVE_SERVE_GRPC=aio` serves through grpc.aio instead (for
measurements and as a fallback).

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
import struct
from typing import Any

import grpc
from tritonclient.grpc import service_pb2 as pb

from trainserve.serve.protocol import refusals
from trainserve.serve.protocol.grpc_wire import OK_TRAILERS, SERVICE, Aborted, frame, status_trailers, too_many
from trainserve.serve.protocol.h2_connection import H2Connection
from trainserve.serve.protocol.h2_flow import OUT_BACKLOG, PARTIAL_FLOOR, H2Stream
from trainserve.serve.protocol.h2_rules import CANCEL, GOAWAY, NO_ERROR
from trainserve.serve.request_errors import RequestTimeout, TooManyConnections
from trainserve.serve.protocol.grpc_guard import CallGuard
from trainserve.core import envs
from trainserve.core.errors import UserError
from trainserve.serve.protocol.grpc_server import GrpcConfig, GrpcServer, InferenceServicer, Malformed, _status

log = logging.getLogger(__name__)


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


class H2GrpcServer:
    """The gRPC endpoint on this module's HTTP/2: `await start()`, then `await stop()` (GrpcServer's interface)."""

    name = "grpc"

    def __init__(self, core: Any, config: GrpcConfig | None = None) -> None:
        self.core = core
        self.config = config or GrpcConfig()
        self.servicer = InferenceServicer(core)
        self.guard = CallGuard(self.config.max_connections, self.config.body_timeout_s, refusals.of(core))
        self.connections: set[H2Connection] = set()
        self.waiting: dict[H2Stream, H2Connection] = {}  # unary calls whose message has not all arrived
        self.parked: dict[H2Stream, H2Connection] = {}  # streams whose replies wait for the client's windows
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
                lambda: H2Connection(self), self.config.host, self.config.port, backlog=1024,
                reuse_port=self.config.reuse_port or None)
        except OSError as error:
            raise OSError(error.errno, f"cannot listen for gRPC on {self.config.host}:{self.config.port}: "
                                       f"{error.strerror or error}") from None
        self.port = self._server.sockets[0].getsockname()[1]
        self._sweeper = self.loop.create_task(self._sweep())
        log.info("gRPC on %s:%d", self.config.host, self.port)
        return self.port

    # --- the guard ---------------------------------------------------------------------------------------
    def guard_admit(self, conn: H2Connection, stream: H2Stream) -> bool:
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

    async def serve_unary(self, conn: H2Connection, stream: H2Stream) -> None:
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

    async def serve_stream(self, conn: H2Connection, stream: H2Stream) -> None:
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
