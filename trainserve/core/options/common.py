"""Options of `trainserve` itself, and those every command that reads or writes a run shares."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from trainserve.core.options.spec import opt
from trainserve.core.runs import RUNS_ENV


@dataclass(kw_only=True)
class RunsDir:
    runs_dir: Path | None = opt(None, f"Folder of runs (default: ${RUNS_ENV}, else ./runs).")


@dataclass(kw_only=True)
class GlobalOptions:
    """`trainserve [OPTIONS] COMMAND`: before any command."""

    verbose: bool = opt(False, "Log debug details.", flags=("--verbose", "-v"))
