"""The HTTP/REST front end (KServe v2 with Triton's extensions) on aiohttp, over the server core.

Plain infer requests are answered by a lean protocol in front of aiohttp (serve/protocol/http_fast.py);
every other request reaches aiohttp. Routes are matched by hand on the split path: cheaper per
request than a router.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from urllib.parse import unquote

from aiohttp import web

from trainserve.serve.protocol import kserve, refusals
from trainserve.serve.engine.server_core import ServerCore
from trainserve.serve.request_errors import InvalidArgument, MethodNotAllowed, NotFound, RequestTimeout, ServeError, TooLarge, Unsupported
from trainserve.serve.protocol.http_fast import KEEPALIVE_S, ConnectionTable, FastConnection
from trainserve.serve.engine.server import ServerOptions
from trainserve.core.options.serve import ServeOptions

log = logging.getLogger(__name__)

JSON = "application/json"
LINGER_S = 2.0  # see HttpFrontEnd.start
# server-level routes (after /v2/) and the one method each takes; anything else on them is a 405
KNOWN_ROUTES = {"health/live": "GET", "health/ready": "GET", "": "GET", "models/stats": "GET",
                "repository/index": "POST"}
_INT64_CONFIG_KEYS = {"dims", "max_queue_delay_microseconds", "default_timeout_microseconds", "versions", "reshape"}


def create_frontend(core: ServerCore, host: str, port: int, options: ServerOptions) -> HttpFrontEnd:
    """The hook serve/engine/server.py calls (see its module docstring)."""
    return HttpFrontEnd(core, host, port, options.max_body_bytes, options.drain_timeout_s, options.body_timeout_s,
                        options.max_connections, options.reuse_port)


def _json(obj, status: int = 200) -> web.Response:
    return web.Response(body=json.dumps(obj, separators=(",", ":")).encode(), status=status, content_type=JSON)


def _error(e: ServeError) -> web.Response:
    headers = {"Allow": e.allow} if isinstance(e, MethodNotAllowed) else None
    response = web.Response(body=kserve.error_body(e.message), status=e.http_status, content_type=JSON, headers=headers)
    if isinstance(e, RequestTimeout):
        response.force_close()  # the rest of that body may still come: the connection cannot be reused
    return response


def _only(allow: str, method: str, path: str) -> None:
    """A known route: refuse any other method than `allow` with 405 and an Allow header."""
    if method != allow:
        raise MethodNotAllowed(method, path, allow)


def config_to_json(config) -> dict:
    """ModelConfig protobuf -> Triton's JSON (proto field names; int64 fields as numbers, as Triton prints them)."""
    from google.protobuf import json_format

    d = json_format.MessageToDict(config, preserving_proto_field_name=True)

    def fix(node):
        if isinstance(node, dict):
            for k, v in node.items():
                if k in _INT64_CONFIG_KEYS:
                    node[k] = [int(x) for x in v] if isinstance(v, list) else int(v)
                else:
                    fix(v)
        elif isinstance(node, list):
            for v in node:
                fix(v)

    fix(d)
    return d


class HttpFrontEnd:
    """aiohttp server for /v2/...: health, metadata, config, stats, repository index, infer."""

    name = "http"

    def __init__(self, core: ServerCore, host: str, port: int, max_body_bytes: int, drain_timeout_s: float = 30.0,
                 body_timeout_s: float = ServeOptions.body_timeout_s, max_connections: int = ServeOptions.max_connections,
                 reuse_port: bool = False) -> None:
        self.reuse_port = reuse_port  # share the port with the other front-end processes (SO_REUSEPORT)
        self.body_timeout_s = body_timeout_s  # a head or body still arriving this long after it began: 408
        self.core = core
        self.drain_timeout_s = drain_timeout_s
        self.host = host
        self.port = port
        self.max_body_bytes = max_body_bytes
        self._runner: web.AppRunner | None = None
        self._server: asyncio.Server | None = None
        self._sweeper: asyncio.Task | None = None
        self.connections = ConnectionTable(max_connections, body_timeout_s, KEEPALIVE_S, refusals.of(core))

    async def start(self) -> int:
        app = web.Application(client_max_size=self.max_body_bytes)
        app.router.add_route("*", "/{tail:.*}", self._dispatch)
        # shutdown_timeout: how long cleanup() lets running handlers finish before closing connections, s
        # lingering_time: after an error answered before its body was read (413, 408), how long aiohttp
        # still drains the body before closing, seconds (its default 10 s kept a stalled sender's connection)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=self.drain_timeout_s,
                                     lingering_time=LINGER_S)
        await self._runner.setup()
        # Connections start on the lean infer path (serve/protocol/http_fast.py), which hands any other request
        # to aiohttp's handler (what TCPSite would have listened with).
        aiohttp_handler = self._runner.server
        loop = asyncio.get_running_loop()
        table = self.connections
        self._server = await loop.create_server(
            lambda: FastConnection(self, table, aiohttp_handler), self.host, self.port, reuse_address=True, backlog=128,
            reuse_port=self.reuse_port or None,
        )
        self._sweeper = loop.create_task(table.sweep())
        return self._server.sockets[0].getsockname()[1]  # the bound socket tells the ephemeral port

    async def stop(self, grace_s: float) -> None:
        if self._server is not None:
            self._server.close()  # stop listening
            self._sweeper.cancel()
        for conn in list(self.connections.fast):
            conn.close_when_idle()
        # aiohttp's connections: waits up to shutdown_timeout (drain_timeout_s) for running handlers, then closes
        cleanup = self._runner.cleanup() if self._runner is not None else asyncio.sleep(0)
        await asyncio.gather(self._drain_fast_connections(), cleanup)

    async def _drain_fast_connections(self) -> None:
        """Wait (up to drain_timeout_s) for the lean path's answers in flight, then close what is left."""
        deadline = time.monotonic() + self.drain_timeout_s
        while any(c.busy for c in self.connections.fast) and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        for conn in list(self.connections.fast):
            if conn.transport is not None:
                conn.transport.close()

    def error_body(self, e: ServeError) -> bytes:
        return kserve.error_body(e.message)

    async def infer_payload(self, model: str, version: str, header_length: str | None, body: bytes | bytearray | memoryview) -> tuple[bytes, int | None]:
        """An infer request's body -> (response body, JSON header length or None); both HTTP paths call this."""
        if header_length is not None:
            try:
                header_length = int(header_length)
            except ValueError:
                raise InvalidArgument(f"{kserve.HEADER_LENGTH} must be an integer, got {header_length!r}") from None
        req = kserve.parse_infer_request(body, header_length)
        results = await self.core.infer(model, version, req.inputs, req.outputs, req.parameters)
        served_version = version or self.core.entry(model).version
        return kserve.encode_infer_response(model, served_version, req, results)

    async def _dispatch(self, request: web.Request) -> web.StreamResponse:
        """Every request aiohttp gets: a model's route (/v2/models/<model>/...) or a server-level one, each
        ServeError answered with its status and Triton's JSON error body."""
        path = request.rel_url.raw_path  # still quoted: a '%2F' inside a model name must not split it
        parts = path.strip("/").split("/")
        if "%" in path:
            parts = [unquote(p) for p in parts]
        try:
            if not parts or parts[0] != "v2":
                raise NotFound(f"Not Found: {request.path}")
            if len(parts) >= 3 and parts[1] == "models" and parts[2] != "stats":
                return await self._model_route(request, parts)
            return await self._server_route(request, parts)
        except ServeError as e:
            return _error(e)

    async def _model_route(self, request: web.Request, parts: list[str]) -> web.StreamResponse:
        """/v2/models/<model>[/versions/<version>][/infer|ready|config|stats]: infer takes POST, the rest GET."""
        method = request.method
        model, rest, version = parts[2], parts[3:], ""
        if len(rest) >= 2 and rest[0] == "versions":
            version, rest = rest[1], rest[2:]
        action = rest[0] if rest else ""
        if len(rest) > 1:
            raise NotFound(f"Not Found: {request.path}")
        if action == "infer":
            _only("POST", method, request.path)
            return await self._infer(request, model, version)
        if action not in ("", "ready", "config", "stats"):
            raise NotFound(f"Not Found: {request.path}")
        _only("GET", method, request.path)
        if action == "":
            return _json(self._metadata(model, version))
        if action == "ready":
            return web.Response(status=200 if self.core.model_ready(model, version) else 400)
        if action == "config":
            return _json(config_to_json(self.core.model_config(model, version)))
        return _json({"model_stats": await self.core.statistics_dicts(model, version)})  # stats

    async def _server_route(self, request: web.Request, parts: list[str]) -> web.StreamResponse:
        """/v2, /v2/health/{live,ready}, /v2/models/stats, /v2/repository/index and
        /v2/repository/models/<model>/{load,unload}; a known route with another method is a 405."""
        method = request.method
        route = (method, "/".join(parts[1:]))
        load_unload = len(parts) == 5 and parts[1:3] == ["repository", "models"] and parts[4] in ("load", "unload")
        allow = KNOWN_ROUTES.get(route[1]) or ("POST" if load_unload else None)
        if allow is not None:
            _only(allow, method, request.path)
        if route == ("GET", "health/live"):
            return web.Response(status=200 if self.core.live else 400)
        if route == ("GET", "health/ready"):
            return web.Response(status=200 if self.core.ready else 400)
        if route == ("GET", ""):
            return _json(self.core.server_metadata())
        if route == ("GET", "models/stats"):
            return _json({"model_stats": await self.core.statistics_dicts()})
        if route == ("POST", "repository/index"):
            return await self._index(request)
        if load_unload:  # POST: any other method was refused above
            return self._load_unload(parts[3], parts[4])
        raise NotFound(f"Not Found: {request.method} {request.path}")

    def _metadata(self, model: str, version: str) -> dict:
        md = self.core.model_metadata(model, version)
        tensors = lambda specs: [{"name": t.name, "datatype": t.datatype, "shape": list(t.shape)} for t in specs]  # noqa: E731
        return {"name": md.name, "versions": md.versions, "platform": md.platform,
                "inputs": tensors(md.inputs), "outputs": tensors(md.outputs)}

    async def _index(self, request: web.Request) -> web.Response:
        body = await self._read_body(request)  # the same size limit and deadline as an inference body
        ready_only = False
        if body.strip():
            try:
                ready_only = bool(json.loads(body).get("ready", False))
            except (ValueError, AttributeError, RecursionError):
                raise InvalidArgument("failed to parse the repository index request JSON") from None
        entries = [e for e in self.core.index() if e.ready or not ready_only]
        out = []
        for e in entries:
            item = {"name": e.name, "version": e.version, "state": e.state}
            if e.reason:
                item["reason"] = e.reason
            out.append(item)
        return _json(out)

    def _load_unload(self, model: str, action: str) -> web.Response:
        if action == "load" and self.core.model_ready(model):
            return _json({})  # already loaded: nothing to do, as Triton answers
        raise Unsupported(
            f"explicit model {action} is not supported: this server serves the repository it started with (model '{model}')"
        )

    async def _read_body(self, request: web.Request) -> bytes:
        if request.content_length is not None and request.content_length > self.max_body_bytes:
            raise TooLarge(request.content_length, self.max_body_bytes)
        try:
            body = await asyncio.wait_for(request.read(), self.body_timeout_s)
        except web.HTTPRequestEntityTooLarge:
            encoding = request.headers.get("Content-Encoding", "").strip().lower()
            raise TooLarge(None, self.max_body_bytes, "" if encoding in ("", "identity") else encoding) from None
        except asyncio.TimeoutError:
            self.connections.trim_due = True  # what arrived of the body is freed; the sweeper trims the heap
            self.connections.refusals.add("http", "body_timeout")
            raise RequestTimeout(self.body_timeout_s) from None
        # aiohttp already undid a gzip/deflate Content-Encoding, and counted the limit on the inflated bytes
        return body

    async def _infer(self, request: web.Request, model: str, version: str) -> web.Response:
        body = await self._read_body(request)
        payload, json_size = await self.infer_payload(model, version, request.headers.get(kserve.HEADER_LENGTH), body)
        headers = None
        content_type = JSON
        if json_size is not None:
            headers = {kserve.HEADER_LENGTH: str(json_size)}
            content_type = "application/octet-stream"
        # Responses go uncompressed even when Accept-Encoding allows gzip: it is a preference, and
        # compressing costs more CPU than loopback bytes.
        return web.Response(body=payload, status=200, headers=headers, content_type=content_type)

