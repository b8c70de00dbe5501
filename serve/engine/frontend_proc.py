"""One front-end process of a multi-front-end server: the HTTP and gRPC front ends over a RemoteCore.

Started only by the model process (serve/engine/model_process.py), never by hand:

    python -m trainserve.serve.engine.frontend_proc --index I --link-fd FD --arena-fd FD --engine-pid PID --options JSON

It binds the server's ports with SO_REUSEPORT (the kernel spreads new connections over the front ends),
reads the registry snapshot from the model process, says READY with its ports, and serves until SIGTERM
(drains like the single-process server) or until the model process goes away (it then exits: a front
end never outlives the model process, PR_SET_PDEATHSIG covers a SIGKILLed one).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import signal
import socket
import sys

from trainserve.core.procs import die_with_parent
from trainserve.serve.engine import ipc, shm, spin
from trainserve.serve.engine.remote_core import RemoteCore
from trainserve.serve.engine.server import Server, ServerOptions, StartError

log = logging.getLogger("trainserve.serve.frontend")


def _read_frame(sock: socket.socket) -> tuple[int, bytes]:
    """One frame, read blocking (the snapshot, before the event loop takes the socket)."""
    def exactly(n: int) -> bytes:
        chunks, got = [], 0
        while got < n:
            chunk = sock.recv(n - got)
            if not chunk:
                raise EOFError("the model process closed the channel")
            chunks.append(chunk)
            got += len(chunk)
        return b"".join(chunks)

    length, kind, _ = ipc.HEADER.unpack(exactly(ipc.HEADER.size))
    return kind, exactly(length)


async def serve(index: int, sock: socket.socket, arena: shm.Arena, options: ServerOptions) -> int:
    """Serve until SIGTERM/SIGINT or the model process's end; 0, or 1 when the front ends could not start."""
    kind, body = _read_frame(sock)
    if kind != ipc.HELLO:
        raise RuntimeError(f"expected the registry snapshot first, got message kind {kind}")
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    core = RemoteCore(ipc.decode(kind, body).snapshot, arena, on_engine_gone=stop.set)
    sock.setblocking(False)
    _, core.link = await loop.create_unix_connection(lambda: ipc.Link(core.on_message, core.on_lost), sock=sock)
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    server = Server(core, options)
    try:
        ports = await server.start()
    except StartError as e:
        print(f"trainserve serve: front end {index}: {e}", file=sys.stderr, flush=True)
        return 1
    core.link.send_message(0, ipc.Ready({k: v for k, v in ports.items() if v is not None}))
    await stop.wait()
    if not core.live:
        log.warning("front end %d: the model process stopped; exiting", index)
    await server.stop()
    core.link.close()
    return 0


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="trainserve.serve.engine.frontend_proc")
    parser.add_argument("--index", type=int, required=True)
    parser.add_argument("--link-fd", type=int, required=True)
    parser.add_argument("--arena-fd", type=int, required=True)
    parser.add_argument("--arena-bytes", type=int, default=shm.ARENA_BYTES)
    parser.add_argument("--engine-pid", type=int, required=True)
    parser.add_argument("--options", required=True)  # ServerOptions as JSON
    args = parser.parse_args(argv)
    die_with_parent(signal.SIGTERM)  # the model process killed: drain what can be drained, exit
    if os.getppid() != args.engine_pid:
        sys.exit(1)  # the model process died before the line above: nobody to serve for
    logging.basicConfig(level=logging.WARNING, format=f"trainserve serve[frontend {args.index}]: %(message)s")
    options = ServerOptions(**json.loads(args.options))
    spin.switch_interval()  # as the model process did (it checked the value)
    arena = shm.Arena(args.arena_fd, args.arena_bytes)
    sock = socket.socket(fileno=args.link_fd)
    sys.exit(asyncio.run(serve(args.index, sock, arena, options)))


if __name__ == "__main__":
    main()
