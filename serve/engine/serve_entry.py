"""`trainserve serve`'s entry: load the repository, then serve it in one process or through front-end processes.

With one front end (the default below 8 cores and for a CPU server) everything runs on one event loop (serve/engine/server.py);
with more, this process becomes the model process and starts the front-end processes
(serve/engine/model_process.py). Either way the same checks run first and fail with one sentence.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path

from trainserve.core.options.serve import ServeOptions
from trainserve.core.procs import usable_cpus
from trainserve.serve.engine import heap
from trainserve.serve.engine.spin import switch_interval
from trainserve.serve.engine.server_core import CoreOptions, ServerCore
from trainserve.serve.engine.model_process import run_engine
from trainserve.serve.model.sessions import CudaUnavailable, spin_in_run
from trainserve.serve.engine.server import Server, ServerOptions, StartError, ready_line, run_until_signalled

log = logging.getLogger(__name__)

MAX_FRONTENDS = 8


def default_frontends(cores: int | None = None, device: str = "cuda") -> int:
    """Front-end processes for `--frontends 0` (auto): 1 for a CPU server or below 8 usable cores, else a quarter
    of the cores, at most 8.

    Why: one front-end process parses about 5k batch-1 requests/s on one core; the model process needs a
    core for its event loop plus the onnxruntime or CUDA threads of its sessions, and the load generator
    on the same host needs cores too. Below 8 cores a second process would take a core the sessions use
    (and on a 2-core CI machine only add start-up time), so the single-process server stays. A CPU
    server's sessions use every core for each batch (a CPU model serves far below what one front end
    parses), so front-end processes only add two crossings between processes to every request and take
    cores from the sessions: on a 16-core host, one process instead of several took batch-1 p50 over HTTP
    from 2.98 to 2.38 ms at one user, with 16 users within noise (docs/BENCHMARKS.md);
    `--frontends N` still asks for N.
    """
    if device == "cpu":
        return 1
    cores = usable_cpus() if cores is None else cores
    return 1 if cores < 8 else min(MAX_FRONTENDS, cores // 4)


def run_server(o: ServeOptions, on_ready: Callable[[str], None] = print) -> None:
    """Load the repository, serve until SIGTERM/SIGINT, drain. Raises StartError with one clear sentence.

    o.frontends: processes that parse HTTP and gRPC (0 = default_frontends()); above 1 this process becomes
    the model process that batches for all of them (serve/engine/model_process.py).
    """
    model_repository, host, frontends = o.model_repository, o.host, o.frontends
    if not 0 <= frontends <= 64:
        raise StartError(f"--frontends {frontends} is invalid; allowed: 0 (from the cores) to 64")
    # bodies are received on event loops (this process's, and the front ends' it starts, which inherit it):
    # no 2 MiB page zeroed inside a recv
    heap.no_huge_pages()
    try:
        interval_s = switch_interval()  # the front-end processes it starts inherit the variable and do the same
        spin_in_run("cpu", 2)  # TRAINSERVE_SERVE_ORT_SPIN checked before anything starts
    except ValueError as e:
        raise StartError(str(e)) from None
    log.info("GIL switch interval %.0f us", interval_s * 1e6)
    frontends = frontends or default_frontends(device=o.device)
    try:
        core_options = CoreOptions(
            Path(model_repository), o.device, o.threads, 1, o.max_queue_size, o.max_queue_bytes, o.queue_timeout_s,
            allow_spinning=o.spin, busy_poll_us=o.busy_poll_us,
        )
        options = ServerOptions(host, o.http_port, o.grpc_port, o.metrics_port, o.max_body_bytes,
                                body_timeout_s=o.body_timeout_s, max_connections=o.max_connections)
    except ValueError as e:
        raise StartError(f"invalid server option: {e}") from None
    core = ServerCore(core_options)
    try:
        core.load()
    except FileNotFoundError:
        raise StartError(
            f"model repository {model_repository} does not exist: pass --model-repository a directory "
            "laid out as <model>/<version>/model.onnx (trainserve export writes one)"
        ) from None
    entries = core.index()
    cuda = [e for e in entries if isinstance(e.error, CudaUnavailable)]
    if cuda:
        raise StartError(str(cuda[0].error))
    if not any(e.ready for e in entries):
        reasons = "; ".join(f"{e.name}: {e.reason}" for e in entries) or "it holds no model directories"
        raise StartError(f"no model in {model_repository} could be loaded ({reasons})")
    if frontends > 1:
        core.frontends = frontends
        run_engine(core, options, frontends, lambda ports: on_ready(ready_line(host, ports, frontends)))
        return
    asyncio.run(run_until_signalled(Server(core, options), lambda ports: on_ready(ready_line(host, ports))))
