"""CPU vs GPU training of the same model at one configuration: two profiles in `runs/<run>/compare/`."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from trainserve.core.errors import UserError
from trainserve.core.fsutil import staged_dir
from trainserve.train.config import TrainConfig
from trainserve.train.loop import fit, prepare
from trainserve.train.seeds import train_more_seeds


def compare_devices(cfg: TrainConfig, out_dir: Path, on_progress: Callable[[Any], None] | None = None,
                    seeds: int = 1) -> dict[str, Any]:
    """Train `cfg` on cpu, then on cuda; write profile-cpu.json and profile-cuda.json; return both records.

    The speedup is computed from these records by trainserve.core.speedup.speedups_of_records, the
    function the report uses, so the command line, speedup.json and the report agree.
    """
    import torch


    if not torch.cuda.is_available():
        raise UserError("compare --no-sweep needs a CUDA GPU and none is visible to PyTorch; run it on a GPU "
                        "machine, sweep the CPU alone with trainserve compare --device cpu, or train on one device "
                        "with trainserve train --device cpu")
    cpu_cfg, gpu_cfg = cfg.replace(device="cpu"), cfg.replace(device="cuda")
    scratch_parent = out_dir.parent
    for c in (cpu_cfg, gpu_cfg):  # every user mistake surfaces before the long CPU run
        prepare(c, scratch_parent, resume=False)
    records = {}
    with staged_dir(out_dir) as tmp:
        for c in (cpu_cfg, gpu_cfg):
            work = tmp / f"train-{c.device}"
            result = fit(c, work, on_progress=on_progress)
            # --seeds N with a target accuracy: N - 1 more runs, their time to accuracy summarised in this record
            train_more_seeds(c, result.record, seeds, tmp / f"seeds-{c.device}",
                             lambda c2, d: fit(c2, d, on_progress=on_progress))
            records[c.device] = result.record
            result.record.save(tmp / f"profile-{c.device}.json")
            shutil.rmtree(work)
    return records
