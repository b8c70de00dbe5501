"""The server's lifecycle: start the core and the front ends on one event loop, drain on SIGTERM/SIGINT.

serve/engine/serve_entry.py loads the repository and runs this, or, with several front-end processes, serve/engine/model_process.py
(which runs this same Server for the core and /metrics, and one in each front-end process over a RemoteCore).

Front ends plug in through one small contract, so the HTTP, gRPC and metrics servers share the core
and the loop without knowing each other:

    # in serve/protocol/http.py, serve/protocol/grpc_h2.py, serve/protocol/prometheus.py
    def create_frontend(core: ServerCore, host: str, port: int, options: ServerOptions) -> FrontEnd

    class FrontEnd(Protocol):
        name: str                                  # "http" | "grpc" | "metrics"
        async def start(self) -> int               # bind and listen; returns the bound port (port 0 -> ephemeral)
        async def stop(self, grace_s: float) -> None   # stop accepting, let in-flight requests finish (<= grace_s), close

A front end whose module is not present (or whose port is -1) is skipped and reported "off".
"""

from __future__ import annotations

import asyncio
import importlib
import importlib.util
import logging
import signal
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from trainserve.core.errors import UserError
from trainserve.core.options.serve import ServeOptions
from trainserve.serve.engine import heap
from trainserve.serve.engine.server_core import ServerCore

log = logging.getLogger(__name__)

# front end name -> module that provides create_frontend(core, host, port, options)
FRONTEND_MODULES = {"http": "trainserve.serve.protocol.http", "grpc": "trainserve.serve.protocol.grpc_h2", "metrics": "trainserve.serve.protocol.prometheus"}


class StartError(UserError):
    """The server could not start (a port in use, no loadable model): one sentence saying what to do."""


class FrontEnd(Protocol):
    name: str

    async def start(self) -> int: ...

    async def stop(self, grace_s: float) -> None: ...


@dataclass(frozen=True)
class ServerOptions:
    """Where and how the front ends listen."""

    host: str = ServeOptions.host  # bind address; 0.0.0.0 only when asked
    http_port: int = ServeOptions.http_port  # 0 = ephemeral, -1 = off
    grpc_port: int = ServeOptions.grpc_port  # 0 = ephemeral, -1 = off
    metrics_port: int = ServeOptions.metrics_port  # 0 = ephemeral, -1 = off
    max_body_bytes: int = ServeOptions.max_body_bytes  # largest request body a front end accepts, bytes
    drain_timeout_s: float = 30.0  # on SIGTERM: how long in-flight requests may take to finish, seconds
    body_timeout_s: float = ServeOptions.body_timeout_s  # a request head or body not fully received this long after it began: 408, seconds
    max_connections: int = ServeOptions.max_connections  # open HTTP connections at most; more are answered 503 and closed
    reuse_port: bool = False  # bind with SO_REUSEPORT: several front-end processes share the ports (serve/engine/model_process.py)

    def __post_init__(self) -> None:
        for field_name in ("http_port", "grpc_port", "metrics_port"):
            port = getattr(self, field_name)
            if not -1 <= port <= 65535:
                raise UserError(f"{field_name}={port} must be -1 (off), 0 (ephemeral) or 1..65535")
        if self.max_body_bytes < 1024:
            raise UserError(f"max_body_bytes={self.max_body_bytes} must be >= 1024")
        if self.drain_timeout_s < 0:
            raise UserError(f"drain_timeout_s={self.drain_timeout_s} must be >= 0")
        if not self.body_timeout_s > 0:
            raise UserError(f"body_timeout_s={self.body_timeout_s} must be > 0")
        if self.max_connections < 1:
            raise UserError(f"max_connections={self.max_connections} must be >= 1")

    def port(self, frontend: str) -> int:
        return {"http": self.http_port, "grpc": self.grpc_port, "metrics": self.metrics_port}[frontend]


def ready_line(host: str, ports: dict[str, int | None], frontends: int = 1) -> str:
    """The machine-readable line tests and scripts read back: 'trainserve serve: ready http=H:P grpc=off ... frontends=N'."""
    parts = [f"{name}={host}:{port}" if port is not None else f"{name}=off" for name, port in ports.items()]
    return "trainserve serve: ready " + " ".join(parts) + f" frontends={frontends}"


class Server:
    """Core + front ends on the running loop. `start()` returns bound ports; `stop()` drains and closes."""

    def __init__(self, core: ServerCore, options: ServerOptions) -> None:
        self.core = core
        self.options = options
        self.frontends: list[FrontEnd] = []
        self.ports: dict[str, int | None] = {}

    async def start(self) -> dict[str, int | None]:
        """Start the core's workers, then every available front end; {name: bound port or None when off}."""
        await self.core.start()
        try:
            for name, module_name in FRONTEND_MODULES.items():
                port = self.options.port(name)
                if port < 0 or importlib.util.find_spec(module_name) is None:
                    self.ports[name] = None
                    continue
                module = importlib.import_module(module_name)
                frontend = module.create_frontend(self.core, self.options.host, port, self.options)
                try:
                    self.ports[name] = await frontend.start()
                except OSError as e:
                    raise StartError(
                        f"the {name} front end cannot listen on {self.options.host}:{port} ({e.strerror or e}): "
                        f"stop whatever uses it or pick another port with --{name}-port"
                    ) from None
                self.frontends.append(frontend)
        except BaseException:
            await self.stop()
            raise
        return self.ports

    async def stop(self) -> None:
        """Stop listening, let in-flight requests finish (up to drain_timeout_s), then stop the core."""
        grace = self.options.drain_timeout_s
        self.core.draining = True  # health/ready answers "not ready" from now on
        await asyncio.gather(*(f.stop(grace) for f in self.frontends), return_exceptions=True)
        await self.core.stop()


async def trim_when_idle(core: ServerCore, every_s: float = 1.0) -> None:
    """Once a second: if requests were served since the last look and nothing is queued or running now,
    give the heap's free memory back (serve.engine.heap), so RSS falls back near its idle level after a flood;
    and when RSS grew anyway (requests refused before the core, whose buffers sit in reference cycles),
    collect those cycles first."""

    seen = -1
    reclaimer = heap.Reclaimer()
    while True:
        await asyncio.sleep(every_s)
        if not core.idle:
            continue
        served = sum(s.success.count + s.fail.count for s in core.statistics())
        if served != seen:
            seen = served
            heap.trim()
        reclaimer.maybe()


async def run_until_signalled(server: Any, on_ready: Callable[[dict[str, int | None]], None],
                              failed: asyncio.Event | None = None) -> None:
    """Start, call on_ready(ports), wait for SIGTERM or SIGINT (or `failed`), then drain and stop.

    `server` is a Server or serve/engine/model_process.py's Engine: start() -> ports, stop(), and the core it serves."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        ports = await server.start()
        on_ready(ports)
        trimmer = loop.create_task(trim_when_idle(server.core))
        waits = [loop.create_task(stop.wait())] + ([loop.create_task(failed.wait())] if failed is not None else [])
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        for w in waits:
            w.cancel()
        trimmer.cancel()
        if stop.is_set():
            log.info("signal received: finishing in-flight requests, then exiting")
    finally:
        await server.stop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
