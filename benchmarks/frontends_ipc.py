"""CPU per request of the multi-front-end channel, in one process: what the model process and a front end each
pay for a request beyond ServerCore.infer (issue 23).

No sockets and no HTTP: a RemoteCore (the front end's side) and the Engine's message handler (the model
process's side) are joined by in-memory transports, over one real memfd arena, on one event loop; the
same core serves both. Requests go in bursts of --burst, as several front ends deliver them under
load. CPU time (time.process_time) is split into the front end's part (building the message, writing
the inputs, reading the reply) and the model process's part (parsing, ServerCore.infer, writing the
outputs, the reply), beside ServerCore.infer called directly in bursts of the same size.

    python benchmarks/frontends_ipc.py --repository runs/R/model_repository --model cnn_cpu [--requests 20000] > OUT.json

The JSON carries machine, command and date beside the figures (benchmarks/results/ keeps such files).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

from trainserve.serve.engine import ipc, shm
from trainserve.serve.engine.server_core import CoreOptions, ServerCore
from trainserve.serve.engine.model_process import Engine, FrontEndProcess
from trainserve.serve.engine.remote_core import RemoteCore, registry_snapshot
from trainserve.serve.engine.server import ServerOptions


class Captured:
    """A transport that keeps what is written."""

    def __init__(self) -> None:
        self.chunks: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.chunks.append(data)

    def take(self) -> bytes:
        data, self.chunks = b"".join(self.chunks), []
        return data

    def set_write_buffer_limits(self, high: int) -> None:
        pass

    def close(self) -> None:
        pass


def inputs_of(core: ServerCore, model: str) -> dict[str, np.ndarray]:
    meta = core.model_metadata(model)
    return {t.name: np.ones([1 if d < 0 else d for d in t.shape], t.dtype) for t in meta.inputs}


async def direct(core: ServerCore, model: str, inputs: dict, requests: int, burst: int) -> float:
    t0 = time.process_time()
    for _ in range(requests // burst):
        await asyncio.gather(*(core.infer(model, "", inputs) for _ in range(burst)))
    return (time.process_time() - t0) / requests * 1e6


async def through_channel(core: ServerCore, model: str, inputs: dict, requests: int, burst: int,
                          merge: bool = True) -> tuple[float, float, float]:
    engine = Engine(core, ServerOptions(), 2)
    arena = shm.Arena(shm.create_arena_fd("frontends-ipc", 1 << 26), 1 << 26)
    child = FrontEndProcess(0, None, arena.mm)  # type: ignore[arg-type]
    child.link = ipc.Link(lambda k, r, b: engine._on_message(child, k, r, b), lambda: None)
    to_frontend = Captured()
    child.link.connection_made(to_frontend)
    replies = [0]
    send = child.link.send

    def counted(kind: int, rid: int, body: bytes) -> None:
        replies[0] += 1
        send(kind, rid, body)

    child.link.send = counted
    remote = RemoteCore(registry_snapshot(core), arena, lambda: None)
    remote._merge = merge
    remote.link = ipc.Link(remote.on_message, lambda: None)
    sent = [0]
    remote_send = remote.link.send

    def counted_sent(kind: int, rid: int, body: bytes) -> None:
        sent[0] += 1
        remote_send(kind, rid, body)

    remote.link.send = counted_sent
    to_engine = Captured()
    remote.link.connection_made(to_engine)
    await remote.start()
    frontend_s = engine_s = 0.0
    for _ in range(0, requests - burst + 1, burst):
        a = time.process_time()
        waiting = [asyncio.ensure_future(remote.infer(model, "", inputs)) for _ in range(burst)]
        for _ in range(3):  # the requests are built and their messages written
            await asyncio.sleep(0)
        data = to_engine.take()
        b = time.process_time()
        child.link.data_received(data)
        while replies[0] < sent[0]:
            await asyncio.sleep(0)
        await asyncio.sleep(0)  # the replies of the last turn are flushed
        data = to_frontend.take()
        c = time.process_time()
        remote.link.data_received(data)
        await asyncio.gather(*waiting)
        frontend_s += (b - a) + (time.process_time() - c)
        engine_s += c - b
    return engine_s / requests * 1e6, frontend_s / requests * 1e6, sent[0] / requests


async def measure(args: argparse.Namespace) -> dict:
    core = ServerCore(CoreOptions(args.repository, intra_op_threads=1, busy_poll_us=0))
    core.load()
    await core.start()
    inputs = inputs_of(core, args.model)
    await direct(core, args.model, inputs, 2000, args.burst)  # warm-up
    rounds = []
    for _ in range(args.rounds):  # alternating, so the machine's drift hits both alike
        d = await direct(core, args.model, inputs, args.requests, args.burst)
        row = {"core_infer_us": round(d, 1)}
        for merge in (False, True):
            e, f, m = await through_channel(core, args.model, inputs, args.requests, args.burst, merge)
            tag = "merged" if merge else "one_by_one"
            row |= {f"model_process_us_{tag}": round(e, 1), f"front_end_us_{tag}": round(f, 1),
                    f"messages_per_request_{tag}": round(m, 3)}
        rounds.append(row)
    await core.stop()
    return {"machine": machine(), "command": " ".join(["python", *sys.argv]), "date": datetime.date.today().isoformat(),
            "model": args.model, "burst": args.burst, "requests": args.requests, "rounds": rounds}


def machine() -> dict:
    """The host the figures belong to (the result files' `machine`)."""
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.machine())
    return {"host": platform.node(), "cpu_model": cpu, "cpu_count": os.cpu_count()}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repository", type=Path, required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--requests", type=int, default=20000)
    p.add_argument("--burst", type=int, default=16)
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    print(json.dumps(asyncio.run(measure(args)), indent=1))


if __name__ == "__main__":
    main()
