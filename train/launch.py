"""`trainserve train --nproc N`: re-launch the same command under torchrun on this machine.

The launcher runs `python -m torch.distributed.run --standalone --nproc-per-node N -m trainserve`
and waits; each worker runs `trainserve train ...` with the given arguments (without --nproc), handed
over in TRAINSERVE_ARGV (JSON) because torchrun's own parser would read `--run` as an abbreviation
of its `--run-path` (trainserve.cli.main reads them when it is started without arguments). On Ctrl-C or SIGTERM it asks torchrun
to stop its workers, waits, and kills whatever is left, so no process outlives the run.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
from collections.abc import Sequence

from trainserve.core import envs
from trainserve.core.errors import UserError
from trainserve.core.procs import die_with_parent, stop_group
from trainserve.train.distributed import GPU_ENV, launched_by_torchrun

log = logging.getLogger(__name__)

ARGV_ENV = envs.ARGV.name  # the workers' trainserve arguments, a JSON list of strings
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


def torchrun_command(nproc: int, python: str | None = None) -> list[str]:
    """torchrun on this machine only (standalone rendezvous on a free port); workers run `python -m trainserve`."""
    if nproc < 1:
        raise UserError(f"--nproc {nproc} is invalid; use 1 or more processes")
    return [python or sys.executable, "-m", "torch.distributed.run", "--standalone",
            "--nproc-per-node", str(nproc), "-m", "trainserve"]


def child_env(device: str, nproc: int, args: Sequence[str] = ()) -> dict[str, str]:
    """The workers' environment: their arguments, NVLink multicast off for GPU runs, cores shared."""
    env = dict(os.environ)
    env[ARGV_ENV] = json.dumps(list(args))
    if device != "cpu":  # "cuda" or "auto": harmless on CPU, required on GPU
        env.update(GPU_ENV)
    # torchrun forces OMP_NUM_THREADS=1 when unset; give each rank its share of the cores instead.
    env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // nproc)))
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


def run_torchrun(nproc: int, args: Sequence[str], device: str = "auto") -> int:
    """Run the command under torchrun and return its exit code; stops every process on interrupt."""
    cmd = torchrun_command(nproc)
    env = child_env(device, nproc, args)
    log.info("launching %d processes: %s (trainserve %s)", nproc, " ".join(cmd[1:]), " ".join(args))
    # its own process group, so stopping it stops torchrun and every worker at once; it dies with this process
    proc = subprocess.Popen(cmd, env=env, start_new_session=True, preexec_fn=die_with_parent)
    previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        return proc.wait()
    except KeyboardInterrupt:
        log.warning("interrupted; stopping %d training processes", nproc)
        stop_group(proc, "torchrun", grace_s=STOP_GRACE_S)
        return 130
    finally:
        signal.signal(signal.SIGTERM, previous)
        if proc.poll() is None:  # any other error in this process
            stop_group(proc, "torchrun", grace_s=STOP_GRACE_S)


def _raise_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def relaunch(nproc: int | None, device: str, argv: Sequence[str] | None = None) -> int | None:
    """For `trainserve train --nproc N`: run this command line under torchrun and return its exit code.

    Each worker runs `python -m trainserve`, which reads TRAINSERVE_ARGV (trainserve.cli.main).
    None means "train in this process": no --nproc, or we already are a torchrun worker.
    """

    if nproc is None or launched_by_torchrun():
        return None
    args = list(sys.argv[1:] if argv is None else argv)
    if "train" not in args:
        raise UserError("--nproc re-launches the command line under torchrun; run `trainserve train --nproc N ...` "
                        "from a shell, or start torchrun yourself (docs/distributed.md)")
    return run_torchrun(nproc, strip_nproc(args), device)
