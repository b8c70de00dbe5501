"""`trainserve train --nproc N`: re-launch the same command under torchrun on this machine.

The launcher runs `python -m torch.distributed.run --standalone --nproc-per-node N -m trainserve
train ...` (the given arguments, without --nproc) and waits. On Ctrl-C or SIGTERM it asks torchrun
to stop its workers, waits, and kills whatever is left, so no process outlives the run.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
from collections.abc import Sequence

from trainserve.errors import UserError

log = logging.getLogger(__name__)

STOP_GRACE_S = 20.0  # torchrun's own grace for its workers is 30 s; we give it this, then SIGKILL


def strip_nproc(argv: Sequence[str]) -> list[str]:
    """The arguments without `--nproc N` / `--nproc=N` (the child must not launch again)."""
    out: list[str] = []
    skip = False
    for a in argv:
        if skip:
            skip = False
            continue
        if a == "--nproc":
            skip = True
            continue
        if a.startswith("--nproc="):
            continue
        out.append(a)
    return out


def torchrun_command(nproc: int, args: Sequence[str], python: str | None = None) -> list[str]:
    if nproc < 1:
        raise UserError(f"--nproc {nproc} is invalid; use 1 or more processes")
    return [python or sys.executable, "-m", "torch.distributed.run", "--standalone",
            "--nproc-per-node", str(nproc), "-m", "trainserve", *args]


def child_env(device: str, nproc: int) -> dict[str, str]:
    """The workers' environment: NVLink multicast off for GPU runs, the cores shared between ranks."""
    from train.distributed import GPU_ENV

    env = dict(os.environ)
    if device != "cpu":  # "cuda" or "auto": harmless on CPU, required on GPU
        env.update(GPU_ENV)
    # torchrun forces OMP_NUM_THREADS=1 when unset; give each rank its share of the cores instead.
    env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // nproc)))
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


def run_torchrun(nproc: int, args: Sequence[str], device: str = "auto") -> int:
    """Run the command under torchrun and return its exit code; stops every process on interrupt."""
    cmd = torchrun_command(nproc, args)
    env = child_env(device, nproc)
    log.info("launching %d processes: %s", nproc, " ".join(cmd[1:]))
    proc = subprocess.Popen(cmd, env=env)
    previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        return proc.wait()
    except KeyboardInterrupt:
        log.warning("interrupted; stopping %d training processes", nproc)
        stop(proc)
        return 130
    finally:
        signal.signal(signal.SIGTERM, previous)
        if proc.poll() is None:  # any other error in this process
            stop(proc)


def _raise_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def stop(proc: subprocess.Popen) -> None:
    """SIGTERM torchrun (it forwards to its workers), wait, then SIGKILL it and any worker left."""
    import psutil

    try:
        children = psutil.Process(proc.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        children = []
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    _, alive = psutil.wait_procs(children, timeout=5.0)
    for c in alive:
        try:
            c.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(alive, timeout=5.0)
