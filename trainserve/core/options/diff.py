"""`trainserve diff`: which runs to set side by side, the noise band, the CI gate, and where to write."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from trainserve.core.options.common import RunsDir
from trainserve.core.options.spec import REQUIRED, opt


@dataclass(kw_only=True)
class DiffJob(RunsDir):
    """`trainserve diff RUN_A RUN_B [RUN_C ...]`: B (and C, ...) against the baseline A."""

    runs: list[str] = opt(REQUIRED, "Runs to compare, the baseline A first; each other run is diffed against it. A "
                                    "run's name in the runs folder, its folder, its report folder or its summary.json.",
                          argument=True)
    noise: str = opt("5%", "Noise band for a figure without repeats in either run: a change within it is noise "
                           "(figures with repeats are tested by Welch's t or their 95% CI).")
    fail_on: str | None = opt(None, "CI gate: exit 1 when a figure moved past a threshold beyond the noise, e.g. "
                                    "'server_capacity<-10%,p99>+20%' (a name may be narrowed: cpu.p99, Server.p99).")
    html: Path | None = opt(None, "Also write the diff as one self-contained HTML page (a chart per section).",
                            flags=("--html",))
    md: Path | None = opt(None, "Also write the diff as Markdown, each section's chart a PNG beside it.",
                          flags=("--md",))
    as_json: Path | None = opt(None, "Also write the diff as JSON for machines ('-': to stdout, instead of the tables).",
                               flags=("--json",))
