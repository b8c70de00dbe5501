"""The model process of a multi-front-end server (`trainserve serve --frontends N`, N > 1).

One process per device holds the ServerCore (sessions and batchers) and the /metrics endpoint; N
front-end processes (serve/engine/frontend_proc.py) parse HTTP and gRPC on the same ports (SO_REUSEPORT:
the kernel spreads connections over them) and hand every request to this process, so one batcher
forms batches from the connections of every front end:

    client ─► front end i (HTTP/gRPC parsing) ─► control message + tensors in arena i ─► engine
                                                                       ServerCore.infer ─► Batcher
    client ◄─ front end i (encoding)          ◄─ reply message + outputs in arena i   ◄─┘

Why processes and not threads: parsing and encoding are Python and hold the GIL; one event loop
tops out near 5k batch-1 requests/s on a core, below what a GPU does. Why one model process and
not N servers: each server would load its own sessions (GiBs of GPU memory each) and batch only its
own requests.

Lifecycle: the ports are reserved here before any front end starts (a bound, non-listening
SO_REUSEPORT socket: a port in use fails at once, and the port stays ours while a front end
restarts); the ready line is printed once every front end listens. A front end that dies is
restarted (its clients saw their connections drop; the answers this process was computing for it
are discarded); one that keeps dying (RESTART_LIMIT times within RESTART_WINDOW_S) stops the server
with one line. SIGTERM drains the front ends first (they finish their in-flight requests, which
this process answers), then the batchers.
"""

from __future__ import annotations

import asyncio
import json
import logging
import mmap
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace

from trainserve.core.procs import child_env
from trainserve.serve.engine import ipc, shm, spin
from trainserve.serve.engine.server_core import ServerCore
from trainserve.serve.request_errors import InvalidArgument, ServeError
from trainserve.serve.engine.remote_core import registry_snapshot
from trainserve.serve.engine.server import Server, ServerOptions, StartError, run_until_signalled

log = logging.getLogger(__name__)

START_TIMEOUT_S = 120.0  # a front end not listening this long after it was started: the server fails to start
RESTART_LIMIT = 5  # front-end deaths within RESTART_WINDOW_S that stop the server instead of a restart
RESTART_WINDOW_S = 60.0
KILL_AFTER_S = 5.0  # on stop: after drain_timeout_s, this much longer before a front end is SIGKILLed, seconds


class ServerFailed(StartError):
    """The server stopped because it could not keep its front ends alive."""


@dataclass(eq=False)
class FrontEndProcess:
    """One front-end child: its process, its end of the channel and this process's map of its arena."""

    index: int
    proc: subprocess.Popen
    mm: mmap.mmap | None
    link: ipc.Link | None = None
    ready: asyncio.Future | None = None  # -> {"http": port, "grpc": port}


def reserve_port(host: str, port: int) -> socket.socket:
    """A bound, non-listening SO_REUSEPORT socket on host:port: the front ends bind the same port beside it;
    no other program can take it meanwhile; it receives no connections itself (it never listens)."""
    family, _, _, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    try:
        sock.bind(address)
    except OSError:
        sock.close()
        raise
    return sock


class Engine:
    """The core, /metrics and N front-end processes; `start()` returns the ports, `stop()` drains everything."""

    def __init__(self, core: ServerCore, options: ServerOptions, frontends: int) -> None:
        self.core = core
        self.options = options
        self.n = frontends
        self.children: list[FrontEndProcess] = []
        self.failed = asyncio.Event()  # set when a front end keeps dying: the server stops
        self.failure = ""
        self._local = Server(core, replace(options, http_port=-1, grpc_port=-1))  # the core and /metrics
        self._reserved: list[socket.socket] = []
        self._frontend_options: ServerOptions | None = None
        self._snapshot = b""
        self._deaths: list[float] = []
        self._stopping = False
        self.spin = spin.plan(frontends, core.options.device, busy_poll_us=core.options.busy_poll_us)
        self._after_ns = self.spin.after_us * 1000

    async def start(self) -> dict[str, int | None]:
        ports: dict[str, int | None] = {}
        try:
            for name in ("http", "grpc"):
                port = self.options.port(name)
                if port < 0:
                    ports[name] = None
                    continue
                try:
                    sock = reserve_port(self.options.host, port)
                except OSError as e:
                    raise StartError(
                        f"the {name} front end cannot listen on {self.options.host}:{port} ({e.strerror or e}): "
                        f"stop whatever uses it or pick another port with --{name}-port") from None
                self._reserved.append(sock)
                ports[name] = sock.getsockname()[1]
            local = await self._local.start()
            ports["metrics"] = local["metrics"]
            self._frontend_options = replace(self.options, http_port=ports["http"] if ports["http"] is not None else -1,
                                             grpc_port=ports["grpc"] if ports["grpc"] is not None else -1,
                                             metrics_port=-1, reuse_port=True)
            log.info("front ends: %d; %s", self.n, self.spin.describe())
            _, self._snapshot = ipc.encode(ipc.Hello({**registry_snapshot(self.core),
                                                      "spin": (self.spin.after_us, self.spin.wait_us,
                                                               self.spin.any_in_flight)}))
            for i in range(self.n):
                self.children.append(await self._spawn(i))
            await self._wait_ready(self.children, START_TIMEOUT_S)
        except BaseException:
            await self.stop()
            raise
        return ports

    async def _spawn(self, index: int) -> FrontEndProcess:
        """Start front end `index` with its channel and a fresh arena, and send it the registry snapshot."""
        loop = asyncio.get_running_loop()
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        for s in (ours, theirs):
            ipc.tune_socket(s)
        arena_fd = shm.create_arena_fd(f"trainserve-frontend{index}")
        try:
            mm = mmap.mmap(arena_fd, shm.ARENA_BYTES)
            argv = [sys.executable, "-m", "trainserve.serve.engine.frontend_proc", "--index", str(index),
                    "--link-fd", str(theirs.fileno()), "--arena-fd", str(arena_fd),
                    "--arena-bytes", str(shm.ARENA_BYTES), "--engine-pid", str(os.getpid()),
                    "--options", json.dumps(asdict(self._frontend_options))]
            # stdout stays this process's alone (the ready line); the front end's errors go to stderr
            proc = subprocess.Popen(argv, pass_fds=(theirs.fileno(), arena_fd), stdin=subprocess.DEVNULL,
                                    stdout=subprocess.DEVNULL, env=child_env())
        finally:
            theirs.close()
            os.close(arena_fd)  # the mappings (ours and the child's) keep the memory; nothing has a name
        child = FrontEndProcess(index, proc, mm, ready=loop.create_future())
        ours.sendall(ipc.HEADER.pack(len(self._snapshot), ipc.HELLO, 0) + self._snapshot)
        ours.setblocking(False)
        _, child.link = await loop.create_unix_connection(
            lambda: ipc.Link(lambda kind, rid, body: self._on_message(child, kind, rid, body),
                             lambda: self._on_lost(child)), sock=ours)
        log.info("front end %d started (pid %d)", index, proc.pid)
        return child

    async def _wait_ready(self, children: list[FrontEndProcess], timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        for child in children:
            try:
                await asyncio.wait_for(asyncio.shield(child.ready), max(0.0, deadline - time.monotonic()))
            except asyncio.TimeoutError:
                raise StartError(f"front end {child.index} was not listening within {timeout_s:.0f} s") from None
            except ConnectionError:
                rc = child.proc.poll()
                raise StartError(f"front end {child.index} exited (code {rc}) before it was listening; "
                                 "its error is above") from None

    # ------------------------------------------------------------------ the channel
    def _on_message(self, child: FrontEndProcess, kind: int, rid: int, body: bytes) -> None:
        if kind == ipc.INFER:
            try:
                message = ipc.decode(kind, body)
                # copied out of the arena at once (one memcpy; a batch of several requests is concatenated
                # anyway): nothing this process keeps, in a queue or a worker's last batch, then points
                # into a front end's arena, so a dead front end's arena is unmapped as soon as it dies
                inputs = {name: shm.view(child.mm, offset, dtype, shape).copy() if offset >= 0
                          else ipc.inline_array(dtype, shape, data) for name, dtype, shape, offset, data in message.tensors}
            except Exception as e:  # a malformed message: that request fails, the channel goes on
                child.link.send_message(rid, ipc.failure(InvalidArgument(f"malformed request message: {e}")))
                return
            out_offset, out_cap = message.out_offset, message.out_cap
            try:  # no task per request: the core calls back when the answer is there (or at once)
                self.core.infer_then(message.model, message.version, inputs,
                                     None if message.outputs is None else list(message.outputs),
                                     lambda result, error: self._answer(child, rid, result, error, out_offset, out_cap),
                                     message.requests)
            except Exception as e:  # not a ServeError (those come through the callback): a bug, logged
                log.exception("inference failed unexpectedly")
                child.link.send_message(rid, ipc.failure(e))
        elif kind == ipc.CALL:
            try:
                method, args = ipc.decode(kind, body)
                if method != "statistics":
                    raise InvalidArgument(f"unknown call {method!r}")
                child.link.send_message(rid, ipc.Result([s.to_dict() for s in self.core.statistics(*args)]))
            except Exception as e:
                child.link.send_message(rid, ipc.failure(e))
        elif kind == ipc.READY:
            if not child.ready.done():
                child.ready.set_result(ipc.decode(kind, body).ports)

    def _answer(self, child: FrontEndProcess, rid: int, result: dict | None, error: Exception | None,
                out_offset: int, out_cap: int) -> None:
        """Send one request's answer (outputs into the front end's arena where they fit) or its error."""
        if error is not None:
            if not isinstance(error, ServeError):
                log.error("inference failed unexpectedly: %s: %s", type(error).__name__, error)
            child.link.send_message(rid, ipc.failure(error))
            return
        if child.link.closed:
            return  # the front end is gone: nobody waits for this answer
        tensors, pos, end = [], out_offset, out_offset + out_cap
        for name, array in result.items():
            if out_offset >= 0 and array.dtype != object and pos + array.nbytes <= end:
                shm.view(child.mm, pos, array.dtype.str, array.shape)[...] = array
                tensors.append(ipc.arena_tensor(name, array, pos))
                pos += shm.aligned(array.nbytes)
            else:
                tensors.append(ipc.inline_tensor(name, array))
        child.link.send_message(rid, ipc.Answer(tuple(tensors)))
        if self._after_ns and (self.core.idle or self.spin.any_in_flight):
            # nothing else to do: the next request is likely to come soon (under load the loop has work)
            self.core.poller.extend(self._after_ns)

    def _on_lost(self, child: FrontEndProcess) -> None:
        if child.ready is not None and not child.ready.done():
            child.ready.set_exception(ConnectionError("front end gone"))
            child.ready.exception()  # retrieved: no "never retrieved" warning when nobody awaits it
        child.mm = None  # unmapped now: only answers being written hold it, for a moment
        if self._stopping or child not in self.children:
            return
        asyncio.get_running_loop().create_task(self._replace(child))

    async def _replace(self, child: FrontEndProcess) -> None:
        """A front end died while serving: restart it, or stop the server when it keeps dying."""
        for _ in range(100):  # its channel closed with its death; reap it
            if child.proc.poll() is not None:
                break
            await asyncio.sleep(0.05)
        else:
            child.proc.kill()
            await asyncio.to_thread(child.proc.wait)
        if self.failed.is_set():
            return  # another death already stopped the server; its line stands
        now = time.monotonic()
        self._deaths = [t for t in self._deaths if now - t < RESTART_WINDOW_S] + [now]
        if len(self._deaths) >= RESTART_LIMIT:
            self.failure = (f"front end {child.index} exited (code {child.proc.returncode}); front ends died "
                            f"{len(self._deaths)} times within {RESTART_WINDOW_S:.0f} s, so the server stops")
            self.failed.set()
            return
        log.warning("front end %d (pid %d) exited with code %s; restarting it", child.index, child.proc.pid,
                    child.proc.returncode)
        if self._stopping:
            return
        try:
            fresh = await self._spawn(child.index)
            self.children[self.children.index(child)] = fresh
            if self._stopping:  # the stop began while it started: it was not among those told to stop
                fresh.proc.send_signal(signal.SIGTERM)
                return
            await asyncio.wait_for(asyncio.shield(fresh.ready), START_TIMEOUT_S)
        except ConnectionError:
            return  # it died too, before listening: its own _on_lost counts it and restarts it (or stops the server)
        except Exception as e:
            if not self._stopping:  # a restart cut short by the server's own stop is no failure
                self.failure = f"front end {child.index} could not be restarted ({type(e).__name__}: {e})"
                self.failed.set()
            return
        log.warning("front end %d restarted (pid %d) and listening", child.index, fresh.proc.pid)

    # ------------------------------------------------------------------ stop
    async def stop(self) -> None:
        """SIGTERM every front end, wait for them (they drain, this process still answering), then the core."""
        if self._stopping:  # already stopping (a failure, then the caller's own stop)
            return
        self._stopping = True
        self.core.draining = True
        for child in self.children:
            if child.proc.poll() is None:
                child.proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + self.options.drain_timeout_s + KILL_AFTER_S
        while any(c.proc.poll() is None for c in self.children) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        for child in self.children:
            if child.proc.poll() is None:
                log.warning("front end %d did not stop in time; killing it", child.index)
                child.proc.kill()
                await asyncio.to_thread(child.proc.wait)
            if child.link is not None:
                child.link.close()
        await self._local.stop()
        for sock in self._reserved:
            sock.close()


async def _run(engine: Engine, on_ready: Callable[[dict[str, int | None]], None]) -> None:
    await run_until_signalled(engine, on_ready, engine.failed)
    if engine.failed.is_set():
        raise ServerFailed(engine.failure)


def run_engine(core: ServerCore, options: ServerOptions, frontends: int,
               on_ready: Callable[[dict[str, int | None]], None]) -> None:
    """Serve `core` through `frontends` front-end processes until SIGTERM/SIGINT; see the module docstring."""

    async def main() -> None:
        await _run(Engine(core, options, frontends), on_ready)

    asyncio.run(main())
