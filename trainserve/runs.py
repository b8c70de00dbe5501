"""Where a run's artifacts live: `<runs-dir>/<run>/{train,compare,export,model_repository,limits,load,report}`."""

from __future__ import annotations

import os
import re
from pathlib import Path

from trainserve.errors import UserError

DEFAULT_RUNS_DIR = Path(os.environ.get("TRAINSERVE_RUNS", "runs"))
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")


def run_dir(run: str, runs_dir: Path | None = None) -> Path:
    """The folder of run `run` (not created here)."""
    if not _NAME.fullmatch(run):  # fullmatch: `$` alone would let a trailing newline through
        raise UserError(f"run name {run!r} is invalid; use letters, digits, '.', '_' and '-' (max 100 characters)")
    return Path(runs_dir if runs_dir is not None else DEFAULT_RUNS_DIR) / run


def existing_run_dir(run: str, runs_dir: Path | None = None) -> Path:
    """The folder of an existing run, or a UserError that says how to make one."""
    d = run_dir(run, runs_dir)
    if not d.is_dir():
        raise UserError(f"run {run!r} not found at {d}; train it first (trainserve train --run {run}) "
                        "or pass --runs-dir")
    return d
