"""Fixtures for the server tests: a repository of tiny models, and the real server on a background thread."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest

from trainserve.serve.engine.server_core import CoreOptions, ServerCore
from trainserve.serve.engine.server import Server, ServerOptions
from tests.serve.tiny_models import make_repository


class ThreadServer:
    """The real Server (core + front ends) on its own event loop thread, on ephemeral loopback ports."""

    def __init__(self, repo: Path, core_options: dict | None = None, server_options: dict | None = None) -> None:
        self.core = ServerCore(CoreOptions(repo, **({"intra_op_threads": 1} | (core_options or {}))))
        opts = {"http_port": 0, "grpc_port": -1, "metrics_port": -1, **(server_options or {})}
        self.server = Server(self.core, ServerOptions(**opts))
        self.ports: dict[str, int | None] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._started = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, daemon=True)

    @property
    def http_url(self) -> str:
        return f"127.0.0.1:{self.ports['http']}"

    def start(self) -> ThreadServer:
        self.core.load()
        self._thread.start()
        if not self._started.wait(30):
            raise TimeoutError("server did not start within 30 s")
        if self._error is not None:
            raise self._error
        return self

    def _run(self) -> None:
        async def main() -> None:
            self._loop = asyncio.get_running_loop()
            self._stop = asyncio.Event()
            try:
                self.ports = await self.server.start()
            except BaseException as e:
                self._error = e
                self._started.set()
                return
            self._started.set()
            try:
                await self._stop.wait()
            finally:
                await self.server.stop()

        asyncio.run(main())

    def call(self, coro, timeout: float = 30):
        """Run a coroutine on the server's loop (e.g. core.infer) and return its result."""
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    def stop(self) -> None:
        if self._loop is not None and self._stop is not None and self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(30)


@pytest.fixture(scope="session")
def model_repo(tmp_path_factory) -> Path:
    return make_repository(tmp_path_factory.mktemp("serve") / "repo")


@pytest.fixture(scope="module")
def server(model_repo):
    srv = ThreadServer(model_repo).start()
    try:
        yield srv
    finally:
        srv.stop()
