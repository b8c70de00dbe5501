"""A real server (core + front ends on real loopback sockets) on an event loop in a background thread.

Cheaper than a subprocess for the protocol tests, and the same code path: serve/engine/server.py's Server.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterator
from pathlib import Path

from trainserve.serve.engine.server_core import CoreOptions, ServerCore
from trainserve.serve.engine.server import Server, ServerOptions


@contextlib.contextmanager
def running_server(repo: Path, max_queue_size: int = 1024, **options: object) -> Iterator[tuple[Server, dict]]:
    """Yield (server, {front end: port}); HTTP is off unless http_port is given. Always stops the loop."""
    core = ServerCore(CoreOptions(model_repository=repo, max_queue_size=max_queue_size))
    core.load()
    settings = {"http_port": -1, "grpc_port": 0, "metrics_port": 0, "drain_timeout_s": 2.0, **options}
    server = Server(core, ServerOptions(**settings))
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="test-server-loop", daemon=True)
    thread.start()
    try:
        ports = asyncio.run_coroutine_threadsafe(server.start(), loop).result(timeout=30)
        yield server, ports
    finally:
        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(server.stop(), loop).result(timeout=30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
        loop.close()
