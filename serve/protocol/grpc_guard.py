"""The gRPC front end's body deadline and connection cap, as the HTTP front end's (docs/serving.md).

grpc.aio gives a unary handler its request only once the whole message has arrived, and has no deadline
of its own for that: a client that stalls mid-message held its call, and the ~5 MiB its connection had
buffered, for good. So ModelInfer is served as a client-streaming handler (the same bytes on the wire:
one message, then the half-close), whose first step is to receive the message itself; the guard notes
when each call began waiting and a sweep cancels the calls still waiting after --body-timeout-s, which
answer DEADLINE_EXCEEDED with the HTTP 408's sentence. grpc then resets the stream and frees what it had
buffered.

The cap counts client connections by their peer address (ip:port, one per TCP connection) while they have
calls in flight: a call from a new peer when --max-connections peers already have calls is answered
UNAVAILABLE with the HTTP 503's sentence. A connection without calls holds only grpc's small
per-connection state and is not counted (grpc.aio does not show connections to Python). Both refusals
are counted in trainserve_refused_total{frontend="grpc"}.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc

from trainserve.serve.request_errors import InvalidArgument, RequestTimeout, TooManyConnections
from trainserve.serve.protocol.refusals import Refusals

log = logging.getLogger(__name__)

GUARDED = "/inference.GRPCInferenceService/ModelInfer"  # the unary method that carries large bodies
STREAM = "/inference.GRPCInferenceService/ModelStreamInfer"


class CallGuard:
    """Calls in flight per peer, and the calls still waiting for their message, with when they began."""

    def __init__(self, max_connections: int, body_timeout_s: float, refusals: Refusals) -> None:
        self.max_connections = max_connections
        self.body_timeout_s = body_timeout_s
        self.refusals = refusals
        self.peers: dict[str, int] = {}  # peer -> calls in flight
        self.waiting: dict[asyncio.Task, float] = {}  # handler task -> loop.time() it began waiting for its message
        self._expired: set[asyncio.Task] = set()

    def admit(self, peer: str) -> bool:
        calls = self.peers.get(peer)
        if calls is None:
            if len(self.peers) >= self.max_connections:
                self.refusals.add("grpc", "connections")
                return False
            calls = 0
        self.peers[peer] = calls + 1
        return True

    def leave(self, peer: str) -> None:
        calls = self.peers.get(peer, 0) - 1
        if calls > 0:
            self.peers[peer] = calls
        else:
            self.peers.pop(peer, None)

    async def receive(self, context: Any) -> Any:
        """The call's one request message; RequestTimeout when it has not arrived within the deadline,
        StopAsyncIteration when the call ended without one.

        context.read(), not the request iterator grpc hands the handler: its async generator keeps the last
        message in its frame for as long as grpc keeps the call's state (a refused 59 MiB request stayed)."""
        task = asyncio.current_task()
        self.waiting[task] = asyncio.get_running_loop().time()
        try:
            message = await context.read()
            if message is grpc.aio.EOF:
                raise StopAsyncIteration
            return message
        except asyncio.CancelledError:
            if task not in self._expired:
                raise
            self._expired.discard(task)
            task.uncancel()
            self.refusals.add("grpc", "body_timeout")
            raise RequestTimeout(self.body_timeout_s) from None
        finally:
            self.waiting.pop(task, None)

    async def sweep(self) -> None:
        """Forever: cancel the calls that waited for their message longer than the deadline (checked every
        quarter of it, as the HTTP lean path's)."""
        loop = asyncio.get_running_loop()
        every = max(0.05, self.body_timeout_s / 4)
        while True:
            await asyncio.sleep(every)
            late = loop.time() - self.body_timeout_s
            for task, since in list(self.waiting.items()):
                if since < late and task not in self._expired:
                    self._expired.add(task)
                    task.cancel()


def guard_handler(method: str, handler: grpc.RpcMethodHandler, guard: CallGuard,
                  abort: Callable[[Any, Exception], Awaitable[None]]) -> grpc.RpcMethodHandler:
    """ModelInfer as a client-streaming handler behind the deadline and the cap; ModelStreamInfer behind the
    cap; any other method unchanged. `abort(context, error)` answers a ServeError with its status."""
    if method == GUARDED and handler.unary_unary is not None:
        inner = handler.unary_unary

        async def unary(requests: AsyncIterator[Any], context: Any) -> Any:
            peer = context.peer()
            if not guard.admit(peer):
                await abort(context, TooManyConnections(guard.max_connections))
            try:
                try:
                    # passed straight on, never held in a local: grpc keeps an aborted call's error, whose
                    # traceback holds this frame; a request named here stayed in memory with it
                    return await inner(await guard.receive(context), context)
                except RequestTimeout as error:
                    await abort(context, error)
                except StopAsyncIteration:  # half-closed without a message: no unary client does this
                    await abort(context, InvalidArgument("the ModelInfer call carried no request message"))
            finally:
                guard.leave(peer)

        return grpc.stream_unary_rpc_method_handler(unary, request_deserializer=handler.request_deserializer,
                                                    response_serializer=handler.response_serializer)
    if method == STREAM and handler.stream_stream is not None:
        inner_stream = handler.stream_stream

        async def stream(requests: AsyncIterator[Any], context: Any) -> AsyncIterator[Any]:
            peer = context.peer()
            if not guard.admit(peer):
                await abort(context, TooManyConnections(guard.max_connections))
            try:
                async for response in inner_stream(requests, context):
                    yield response
            finally:
                guard.leave(peer)

        return grpc.stream_stream_rpc_method_handler(stream, request_deserializer=handler.request_deserializer,
                                                     response_serializer=handler.response_serializer)
    return handler
