"""`trainserve run`: every stage in one command (the model and cost trees, plus what only `run` decides)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from trainserve.core.options.common import RunsDir
from trainserve.core.options.spec import like, opt
from trainserve.core.options.train import PRESETS, Seeds, TrainOptions

RUN_DEVICES = ("auto", "cpu", "cuda")


@dataclass(kw_only=True)
class RunOptions(Seeds, RunsDir):
    """What `trainserve run` decides; pipeline.RunConfig takes these and the resolved cost options."""

    preset: str | None = opt(None, "Size preset (default: small on a GPU machine, tiny with --quick or without a "
                                   "GPU).", flags=("--preset", "-p"), choices=PRESETS)
    device: str = opt("auto", "auto: the CPU, plus the GPU when there is one; cuda fails without a GPU.",
                      choices=RUN_DEVICES)
    quick: bool = opt(False, "A small job: under 3 minutes on a 2-core CPU.", flags=("--quick",))
    run: str = opt("", "Run name (default: run-DATE-TIME).", flags=("--run",))
    sweep: bool = opt(True, "Sweep training batch sizes and precisions on the CPU (and the GPU) for the training "
                            "speedup at the same configuration and each device at its best; --no-sweep: one "
                            "fixed-point CPU-vs-GPU compare.", flags=("--sweep/--no-sweep",))
    sweep_budget_s: float | None = opt(None, "Seconds the training sweep may take per device (default: 25 with "
                                             "--quick, else 60).", unit="s", flags=("--sweep-budget-s",))
    dataset: str = like(TrainOptions, "dataset")
    target_accuracy: float | None = like(TrainOptions, "target_accuracy")
    onnx: Path | None = opt(None, "Serve a model trained elsewhere: skip training; its inputs are read from the "
                                  "graph, whose batch dimension must be dynamic.")
    repeats: int = opt(1, "Measure each served operating point N times; the report shows mean and 95% CI.")
    resume: bool = opt(False, "Finish a run that stopped (a failed stage, Ctrl-C, a time limit): the stages it "
                              "completed are kept, the rest run. Give its --run and the options it was started "
                              "with.", flags=("--resume",))
