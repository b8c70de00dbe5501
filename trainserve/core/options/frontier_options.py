"""`trainserve frontier`: which model family to scale, how to measure each size, and the capacity.

FrontierConfig (train/frontier.py) is these options resolved and checked.
"""

from __future__ import annotations

from dataclasses import dataclass

from trainserve.core.options.common import RunsDir
from trainserve.core.options.spec import like, opt
from trainserve.core.options.train import ModelOptions

FRONTIER_DEVICES = ("auto", "cpu", "cuda")


@dataclass(kw_only=True)
class FrontierJob(RunsDir):
    """`trainserve frontier`: peak memory of training and inference by model size on one device."""

    model: str = opt("transformer", "transformer (the zoo's, scaled by d_model, depth growing with it), or your own "
                                    "path/to/file.py:build scaled by --size-arg.", flags=("--model", "-m"))
    size_arg: str | None = opt(None, "Your own model: the keyword argument of its function that scales it, e.g. "
                                     "width.")
    sizes: tuple[int, ...] | None = opt(None, "Values of the scaled argument to measure, ascending (default for the "
                                              "transformer: d_model 64,128,...,4096, about 0.6 M to 10 B parameters).",
                                        cli_type=str | None)
    input_shape: tuple[int, ...] | None = like(ModelOptions, "input_shape")
    input_dtype: str = like(ModelOptions, "input_dtype")
    vocab_size: int | None = opt(None, "Token ids 0..V-1 (the transformer's default: 8192).")
    num_classes: int = opt(10, "Classes of the logits.")
    device: str = opt("auto", "auto: cuda when a GPU is visible, else cpu.", choices=FRONTIER_DEVICES)
    batch_size: int = opt(8, "Samples per step at every size, training and inference.", unit="samples",
                          flags=("--batch-size", "-b"))
    seq_len: int = opt(128, "Transformer: tokens per sample.", unit="tokens")
    train_precisions: str = opt("fp32,bf16", "Training precisions (autocast), comma-separated: fp32, bf16.")
    checkpointing: bool = opt(True, "Also train each size with activation checkpointing (torch.utils.checkpoint "
                                    "around each block).", flags=("--checkpointing/--no-checkpointing",))
    infer: bool = opt(True, "Also measure inference of the exported fp32, fp16 (GPU) and int8 ONNX models "
                            "(onnxruntime working set, arena included).", flags=("--infer/--no-infer",))
    memory_cap_gib: float | None = opt(None, "Capacity a point must fit (default on CUDA: the card's memory, "
                                             "enforced as a real out-of-memory; on the CPU none, so no edge is "
                                             "drawn).", unit="GiB")
    budget_s: float = opt(300.0, "Seconds for all points; a point that would start later is skipped.", unit="s",
                          flags=("--budget-s",))
    check_edge: bool = opt(True, "Measure each series at the size its fitted memory model predicts as the largest "
                                 "that fits.", flags=("--check-edge/--no-check-edge",))
    run: str = opt("default", "Run name: writes RUNS_DIR/RUN/frontier/DEVICE.json.")
