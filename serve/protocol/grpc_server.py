"""The KServe v2 gRPC service, on the servicer generated from the protos tritonclient ships.

The servicer here is what both gRPC servers call: serve/protocol/grpc_h2.py (the default, its own HTTP/2) and the
grpc.aio server below (TRAINSERVE_SERVE_GRPC=aio). Every RPC is a thin translation between protobuf and
the core (serve/engine/server_core.py), which knows nothing of gRPC. Errors become gRPC status codes from the
core's error classes (INVALID_ARGUMENT, NOT_FOUND, UNAVAILABLE for a full queue or an unready model,
INTERNAL), with Triton's message wording; a request with an id gets Triton's "[request id: ...]"
prefix on inference errors.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import grpc
from google.protobuf import json_format
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc

from trainserve.serve.protocol import refusals
from trainserve.serve.request_errors import ServeError
from trainserve.serve.protocol.grpc_guard import CallGuard, guard_handler
from trainserve.serve.protocol.grpc_codec import decode_inputs, encode_response, params_to_dict, requested_outputs
from trainserve.core.errors import UserError
from trainserve.core.options.serve import ServeOptions

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class GrpcConfig:
    """Where the gRPC endpoint listens and how large a message it takes."""

    host: str = ServeOptions.host  # loopback unless the user says otherwise
    port: int = 8001  # Triton's gRPC port; 0 = any free port (read back from GrpcServer.port)
    max_message_bytes: int = 64 << 20  # larger requests get RESOURCE_EXHAUSTED from gRPC itself, bytes
    grace_s: float = 5.0  # on stop, how long in-flight RPCs may take to finish, seconds
    reuse_port: bool = False  # share the port with the other front-end processes (SO_REUSEPORT)
    body_timeout_s: float = ServeOptions.body_timeout_s  # a ModelInfer message not received this long after its call began: DEADLINE_EXCEEDED
    max_connections: int = ServeOptions.max_connections  # client connections with calls in flight at most; a call from one more: UNAVAILABLE

    def __post_init__(self) -> None:
        if not 0 <= self.port <= 65535:
            raise UserError(f"GrpcConfig.port={self.port} must be in 0..65535")
        if self.max_message_bytes < 1024:
            raise UserError(f"GrpcConfig.max_message_bytes={self.max_message_bytes} must be >= 1024")
        if self.grace_s < 0:
            raise UserError(f"GrpcConfig.grace_s={self.grace_s} must be >= 0")
        if not self.body_timeout_s > 0:
            raise UserError(f"GrpcConfig.body_timeout_s={self.body_timeout_s} must be > 0")
        if self.max_connections < 1:
            raise UserError(f"GrpcConfig.max_connections={self.max_connections} must be >= 1")


def _status(error: Exception) -> tuple[grpc.StatusCode, str]:
    """The gRPC status code and message for an error raised while serving an RPC."""
    if isinstance(error, ServeError):  # the codec's errors are InvalidArgument too
        return getattr(grpc.StatusCode, error.grpc_code, grpc.StatusCode.INTERNAL), error.message
    log.exception("unexpected error in a gRPC handler", exc_info=error)
    return grpc.StatusCode.INTERNAL, f"internal error: {type(error).__name__}: {error}"


@dataclass(frozen=True)
class Malformed:
    """What a request message that protobuf cannot parse decodes to (see _SafeDecoding): the handler
    answers it with INVALID_ARGUMENT, or on a stream with an error response, and goes on."""

    message: str


def _safe(deserialize: Callable[[bytes], Any]) -> Callable[[bytes], Any]:
    def decode(data: bytes) -> Any:
        try:
            return deserialize(data)
        except Exception as error:  # protobuf's DecodeError, or anything a corrupt message provokes
            return Malformed(f"failed to parse the request message: {error}")

    return decode


class _SafeDecoding(grpc.GenericRpcHandler):
    """The service's handlers with request decoding that never fails inside grpc: left to grpc, a message
    protobuf cannot parse answers UNKNOWN on a unary call and ends a stream with status OK, dropping
    every request after it."""

    def __init__(self, inner: grpc.GenericRpcHandler, guard: CallGuard | None = None) -> None:
        self.inner = inner
        self.guard = guard  # the body deadline and connection cap (serve/protocol/grpc_guard.py), when given
        self._cache: dict[str, grpc.RpcMethodHandler | None] = {}

    def service(self, handler_call_details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler | None:
        method = handler_call_details.method
        if method not in self._cache:
            handler = self.inner.service(handler_call_details)
            if handler is not None and handler.request_deserializer is not None:
                handler = handler._replace(request_deserializer=_safe(handler.request_deserializer))
                if self.guard is not None:
                    handler = guard_handler(method, handler, self.guard, _abort)
            self._cache[method] = handler
        return self._cache[method]


async def _abort(context: grpc.aio.ServicerContext, error: Exception) -> None:
    code, message = _status(error)
    await context.abort(code, message)


def _rpc(method: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    """Turn the core's exceptions into gRPC status codes for a unary RPC."""
    @functools.wraps(method)
    async def wrapper(self: InferenceServicer, request: Any, context: grpc.aio.ServicerContext) -> Any:
        if isinstance(request, Malformed):
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, request.message)
        try:
            return await method(self, request, context)
        except Exception as error:  # every failure answers the client with a status, never a dropped call
            code, message = _status(error)
        # Aborted outside the except block and without the request: grpc keeps the AbortError on the call's
        # state after the call, and its traceback (and the error it would chain) hold this frame; with the
        # request still in it, each refused request (up to the body limit, e.g. 59 MiB) would stay in memory.
        del request
        await context.abort(code, message)

    return wrapper


class InferenceServicer(service_pb2_grpc.GRPCInferenceServiceServicer):
    """GRPCInferenceService over a ServerCore (serve/engine/server_core.py)."""

    def __init__(self, core: Any) -> None:
        self.core = core
        self._stream_wakers: set[Callable[[], None]] = set()  # one per open ModelStreamInfer stream
        self.draining = False  # stop(): streams end once they have nothing in flight

    def drain_streams(self) -> None:
        """End every open stream that has no request in flight now, the others after their last answer: an
        idle stream would otherwise hold the server's shutdown for the whole drain timeout."""
        self.draining = True
        for wake in list(self._stream_wakers):
            wake()

    @_rpc
    async def ServerLive(self, request: pb.ServerLiveRequest, context: Any) -> pb.ServerLiveResponse:
        return pb.ServerLiveResponse(live=self.core.live)

    @_rpc
    async def ServerReady(self, request: pb.ServerReadyRequest, context: Any) -> pb.ServerReadyResponse:
        return pb.ServerReadyResponse(ready=self.core.ready)

    @_rpc
    async def ServerMetadata(self, request: pb.ServerMetadataRequest, context: Any) -> pb.ServerMetadataResponse:
        meta = self.core.server_metadata()
        return pb.ServerMetadataResponse(name=meta["name"], version=meta["version"], extensions=meta["extensions"])

    @_rpc
    async def ModelReady(self, request: pb.ModelReadyRequest, context: Any) -> pb.ModelReadyResponse:
        return pb.ModelReadyResponse(ready=self.core.model_ready(request.name, request.version))

    @_rpc
    async def ModelMetadata(self, request: pb.ModelMetadataRequest, context: Any) -> pb.ModelMetadataResponse:
        meta = self.core.model_metadata(request.name, request.version)
        tensor = pb.ModelMetadataResponse.TensorMetadata
        return pb.ModelMetadataResponse(
            name=meta.name, versions=meta.versions, platform=meta.platform,
            inputs=[tensor(name=t.name, datatype=t.datatype, shape=t.shape) for t in meta.inputs],
            outputs=[tensor(name=t.name, datatype=t.datatype, shape=t.shape) for t in meta.outputs],
        )

    @_rpc
    async def ModelConfig(self, request: pb.ModelConfigRequest, context: Any) -> pb.ModelConfigResponse:
        response = pb.ModelConfigResponse()
        response.config.CopyFrom(self.core.model_config(request.name, request.version))
        return response

    @_rpc
    async def ModelStatistics(self, request: pb.ModelStatisticsRequest, context: Any) -> pb.ModelStatisticsResponse:
        response = pb.ModelStatisticsResponse()
        for stats in await self.core.statistics_dicts(request.name, request.version):
            # the core's dict is the statistics extension's JSON form, field for field
            json_format.ParseDict(stats, response.model_stats.add())
        return response

    @_rpc
    async def RepositoryIndex(self, request: pb.RepositoryIndexRequest, context: Any) -> pb.RepositoryIndexResponse:
        response = pb.RepositoryIndexResponse()
        for entry in self.core.index():
            if request.ready and not entry.ready:
                continue
            response.models.add(name=entry.name, version=entry.version, state=entry.state, reason=entry.reason)
        return response

    async def _infer(self, request: pb.ModelInferRequest) -> pb.ModelInferResponse:
        try:
            version = self.core.entry(request.model_name, request.model_version).version
            outputs = await self.core.infer(request.model_name, request.model_version, decode_inputs(request),
                                            requested_outputs(request), params_to_dict(request.parameters))
            return encode_response(request.model_name, version, request.id, outputs)
        except ServeError as error:
            if request.id:  # Triton names the request in inference errors
                error.message = f"[request id: {request.id}] {error.message}"
            raise

    @_rpc
    async def ModelInfer(self, request: pb.ModelInferRequest, context: Any) -> pb.ModelInferResponse:
        return await self._infer(request)

    async def ModelStreamInfer(self, request_iterator: AsyncIterator[pb.ModelInferRequest],
                               context: Any) -> AsyncIterator[pb.ModelStreamInferResponse]:
        """Each request is answered on the stream as soon as it finishes; errors travel in error_message."""
        done: asyncio.Queue[pb.ModelStreamInferResponse | None | object] = asyncio.Queue()
        pending: set[asyncio.Task] = set()

        async def answer(request: pb.ModelInferRequest) -> None:
            try:
                response = pb.ModelStreamInferResponse(infer_response=await self._infer(request))
            except Exception as error:
                response = pb.ModelStreamInferResponse(
                    error_message=_status(error)[1], infer_response=pb.ModelInferResponse(
                        model_name=request.model_name, model_version=request.model_version, id=request.id))
            pending.discard(asyncio.current_task())  # before the answer is seen: a draining stream may end on it
            done.put_nowait(response)

        async def read_all() -> None:
            try:
                async for request in request_iterator:
                    if isinstance(request, Malformed):  # answered on the stream; the stream goes on
                        await done.put(pb.ModelStreamInferResponse(error_message=request.message))
                        continue
                    task = asyncio.create_task(answer(request))
                    pending.add(task)
                    task.add_done_callback(pending.discard)
                if pending:
                    await asyncio.gather(*list(pending))
            finally:
                await done.put(None)  # end of stream (or the client went away): stop yielding

        wake = functools.partial(done.put_nowait, _WAKE)
        self._stream_wakers.add(wake)
        reader = asyncio.create_task(read_all())
        try:
            while (response := await done.get()) is not None:
                if response is not _WAKE:
                    yield response
                if self.draining and not pending and done.empty():
                    break  # the server stops and this stream has nothing in flight: end it (status OK)
        finally:
            self._stream_wakers.discard(wake)
            reader.cancel()
            for task in list(pending):
                task.cancel()


_WAKE = object()  # put on a stream's queue to make it look at InferenceServicer.draining


def _unimplemented(name: str) -> Callable[..., Awaitable[Any]]:
    async def handler(self: InferenceServicer, request: Any, context: grpc.aio.ServicerContext) -> Any:
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, f"{name} is not supported by this server")

    handler.__name__ = name
    return handler


# The generated base class answers these synchronously, which grpc.aio cannot run without a thread
# pool; give them async UNIMPLEMENTED answers (model control, shared memory, trace and log settings).
for _name in ("RepositoryModelLoad", "RepositoryModelUnload", "SystemSharedMemoryStatus",
              "SystemSharedMemoryRegister", "SystemSharedMemoryUnregister", "CudaSharedMemoryStatus",
              "CudaSharedMemoryRegister", "CudaSharedMemoryUnregister", "TraceSetting", "LogSettings"):
    setattr(InferenceServicer, _name, _unimplemented(_name))


class _HandlerCollector:
    """Stands in for the server in the generated add_..._to_server: keeps its generic handler, drops the
    registered-method copy of the same handlers."""

    def __init__(self) -> None:
        self.handlers: list[grpc.GenericRpcHandler] = []

    def add_generic_rpc_handlers(self, handlers: tuple[grpc.GenericRpcHandler, ...]) -> None:
        self.handlers.extend(handlers)

    def add_registered_method_handlers(self, service: str, handlers: dict[str, grpc.RpcMethodHandler]) -> None:
        pass


def _generic_handlers(servicer: InferenceServicer, guard: CallGuard | None = None) -> list[grpc.GenericRpcHandler]:
    """The service's handlers as generic handlers only.

    Why: grpc.aio keeps one pending request_call per registered method and, for every RPC it accepts,
    runs asyncio.wait over all of them (23 futures for this service, a callback added to and removed
    from each); with only the generic handler that wait is over one future: ~14 -> ~7 us of event-loop
    time per RPC (docs/BENCHMARKS.md). Dispatch is unchanged: the generic handler maps the same
    method paths to the same handlers.
    """
    collector = _HandlerCollector()
    service_pb2_grpc.add_GRPCInferenceServiceServicer_to_server(servicer, collector)
    return [_SafeDecoding(h, guard) for h in collector.handlers]


class GrpcServer:
    """The gRPC endpoint's lifecycle on the running event loop: `await start()`, then `await stop()`."""

    name = "grpc"

    def __init__(self, core: Any, config: GrpcConfig | None = None) -> None:
        self.core = core
        self.config = config or GrpcConfig()
        self._server: grpc.aio.Server | None = None
        self.port: int | None = None  # bound port, known after start()
        self.guard = CallGuard(self.config.max_connections, self.config.body_timeout_s, refusals.of(core))
        self._sweeper: asyncio.Task | None = None

    async def start(self) -> int:
        """Bind and serve; returns the bound port (the OS's choice for port 0)."""
        options = [("grpc.max_receive_message_length", self.config.max_message_bytes),
                   ("grpc.max_send_message_length", self.config.max_message_bytes),
                   # a taken port must fail, not be shared, except among this server's front-end processes
                   ("grpc.so_reuseport", 1 if self.config.reuse_port else 0)]
        server = grpc.aio.server(options=options)
        servicer = self._servicer = InferenceServicer(self.core)
        if handlers := _generic_handlers(servicer, self.guard):
            server.add_generic_rpc_handlers(handlers)
        else:  # generated code that registers no generic handler: serve it as generated, only slower
            service_pb2_grpc.add_GRPCInferenceServiceServicer_to_server(servicer, server)
        address = f"{self.config.host}:{self.config.port}"
        try:
            port = server.add_insecure_port(address)
        except RuntimeError as error:  # grpcio raises when it cannot bind
            raise OSError(f"cannot listen for gRPC on {address}: {error}") from None
        if port == 0:
            raise OSError(f"cannot listen for gRPC on {address}: the port is taken or the address is invalid")
        await server.start()
        self._server, self.port = server, port
        self._sweeper = asyncio.get_running_loop().create_task(self.guard.sweep())
        log.info("gRPC (grpc.aio, TRAINSERVE_SERVE_GRPC=aio) on %s:%d", self.config.host, port)
        return port

    async def stop(self, grace_s: float | None = None) -> None:
        """Refuse new RPCs and let in-flight ones finish for up to grace_s (default: the config's)."""
        if self._sweeper is not None:
            self._sweeper.cancel()
        if self._server is not None:
            self._servicer.drain_streams()
            await self._server.stop(self.config.grace_s if grace_s is None else grace_s)
            self._server = None
