"""Where a run's artifacts live: `<runs-dir>/<run>/{train,compare,export,model_repository,limits,load,report}`."""

from __future__ import annotations

import os
import re
from pathlib import Path

from trainserve.core import envs
from trainserve.core.errors import UserError

RUNS_ENV = envs.RUNS.name
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")


def default_runs_dir() -> Path:
    """Where runs live unless a command is given --runs-dir: $TRAINSERVE_RUNS, else ./runs (read at each
    call, so every command, and a test that sets the variable, sees the same folder)."""
    return envs.RUNS.get()


def run_dir(run: str, runs_dir: Path | None = None, writable: bool = False) -> Path:
    """The folder of run `run` (not created here). With `writable`, a UserError unless it can be written,
    checked before any work, so a bad --runs-dir never fails only after an epoch of training."""
    if not _NAME.fullmatch(run):  # fullmatch: `$` alone would let a trailing newline through
        raise UserError(f"run name {run!r} is invalid; use letters, digits, '.', '_' and '-' (max 100 characters)")
    d = Path(runs_dir if runs_dir is not None else default_runs_dir()) / run
    if writable:
        _check_writable(d)
    return d


def existing_run_dir(run: str, runs_dir: Path | None = None, writable: bool = False) -> Path:
    """The folder of an existing run, or a UserError that says how to make one."""
    d = run_dir(run, runs_dir)
    if not d.is_dir():
        raise UserError(f"run {run!r} not found at {d}; train it first (trainserve train --run {run}) "
                        "or pass --runs-dir")
    if writable:
        _check_writable(d)
    return d


def _check_writable(folder: Path) -> None:
    """The nearest existing part of `folder` must be a folder this process can write into."""
    probe = folder
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if not probe.is_dir():
        raise UserError(f"{probe} is a file, so the run folder {folder} cannot be made; "
                        "pass --runs-dir with a folder (or a path that does not exist yet)")
    if not _can_write(probe):
        raise UserError(f"{probe} is not writable, so the run folder {folder} cannot be written; "
                        "pass a --runs-dir you can write to")


def _can_write(folder: Path) -> bool:
    return os.access(folder, os.W_OK | os.X_OK)
