"""Time to accuracy over several seeds (`--seeds N` with `--target-accuracy`), the MLPerf Training way:
one seed's time to accuracy is one draw of a noisy quantity, so the same configuration is trained N times
with seeds seed, seed+1, ..., and the report gives the mean ± the sample standard deviation.

The first seed is the run itself (its checkpoint, card and profile stay the run's); the others train in a
scratch folder that is removed afterwards. The figures of every seed, and their mean and sd, go into the
first seed's record as extra["time_to_accuracy_seeds"].
"""

from __future__ import annotations

import dataclasses
import shutil
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

from trainserve.core.errors import UserError
from trainserve.core.profile import ProfileRecord, TimeToAccuracy
from trainserve.train.config import TrainConfig

DEFAULT_SEEDS = 3  # with --target-accuracy and no --seeds
MAX_SEEDS = 100


def resolve_seeds(seeds: int | None, target_accuracy: float | None) -> int:
    """N: the given --seeds, else 3 with --target-accuracy and 1 without; a UserError for a bad value."""
    if seeds is None:
        return DEFAULT_SEEDS if target_accuracy is not None else 1
    if isinstance(seeds, bool) or not isinstance(seeds, int) or not 1 <= seeds <= MAX_SEEDS:
        raise UserError(f"--seeds {seeds!r} is invalid; give the number of seeds to train, 1 to {MAX_SEEDS}")
    if seeds > 1 and target_accuracy is None:
        raise UserError(f"--seeds {seeds} repeats training to a target accuracy; add --target-accuracy A")
    return seeds


def summarise(per_seed: list[tuple[int, TimeToAccuracy | None]]) -> dict[str, Any]:
    """{n, reached, mean_seconds, sd_seconds, ..., runs}: mean and sample sd over the seeds that reached it."""
    runs = [{"seed": s, **(dataclasses.asdict(t) if t is not None else {"reached": False})} for s, t in per_seed]
    hit = [r for r in runs if r.get("reached")]

    def stats(key: str) -> tuple[float | None, float | None]:
        xs = [r[key] for r in hit if r.get(key) is not None]
        if not xs:
            return None, None
        return statistics.fmean(xs), (statistics.stdev(xs) if len(xs) > 1 else None)

    (t_mean, t_sd), (e_mean, e_sd), (j_mean, j_sd) = (stats("time_to_accuracy_s"), stats("epochs_to_accuracy"),
                                                      stats("energy_to_accuracy_j"))
    return {"n": len(runs), "reached": len(hit), "mean_seconds": t_mean, "sd_seconds": t_sd,
            "mean_epochs": e_mean, "sd_epochs": e_sd, "mean_energy_j": j_mean, "sd_energy_j": j_sd,
            "runs": runs}


def train_more_seeds(cfg: TrainConfig, record: ProfileRecord, n: int, scratch: Path,
                     fit: Callable[[TrainConfig, Path], Any]) -> dict[str, Any] | None:
    """Train seeds cfg.seed+1 .. cfg.seed+n-1 with `fit(cfg, folder)` in `scratch`; put the summary of all
    n (the run's own record first) into record.extra and return it. None when n < 2 or no target is set."""
    if n < 2 or cfg.target_accuracy is None:
        return None
    per_seed: list[tuple[int, TimeToAccuracy | None]] = [(cfg.seed, record.time_to_accuracy)]
    try:
        for k in range(1, n):
            seed = cfg.seed + k
            result = fit(cfg.replace(seed=seed), scratch / f"seed-{seed}")
            per_seed.append((seed, result.record.time_to_accuracy))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    summary = summarise(per_seed)
    record.extra["time_to_accuracy_seeds"] = summary
    return summary
