"""The largest batch that fits in device memory, for training and for inference of the same model.

Search: double from `start` until a try runs out of memory, then bisect between the last batch
that fitted and the first that did not, until the two are within `resolution` of the answer (by
default 1/256 of it: a try at a batch of hundreds of thousands takes seconds, and the last few
bisection steps would only move the answer by a fraction of a percent). Each out-of-memory is caught and
the memory released (garbage collection, then the CUDA caching allocator's cache) before the next
try; any other error propagates.
"""

from __future__ import annotations

import gc
import logging
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from trainserve.core.errors import UserError

log = logging.getLogger(__name__)

TryBatch = Callable[[int], None]
# make_batch(n) -> (inputs, labels): one batch of n samples, on any device (moved by the probe).
MakeBatch = Callable[[int], tuple[torch.Tensor | tuple[torch.Tensor, ...], torch.Tensor]]


def is_oom(e: BaseException) -> bool:
    """torch's OutOfMemoryError, or a RuntimeError from a backend that only says so in words."""
    if isinstance(e, torch.OutOfMemoryError):
        return True
    return isinstance(e, RuntimeError) and "out of memory" in str(e).lower()


def release_memory() -> None:
    """Drop what a try left behind, so the next try starts from the same free device memory.

    Only with CUDA in use: a full gc.collect costs ~0.3 s in a process that imported torch, and on
    a CPU there is no device cache to give back.
    """
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        gc.collect()  # reference cycles (e.g. through a caught exception's frames) hold tensors
        torch.cuda.synchronize()
        torch.cuda.empty_cache()


DEFAULT_RESOLUTION = 1 / 256  # relative: the answer is within 0.4% below the true largest batch


def find_max_batch(try_batch: TryBatch, start: int = 1, limit: int = 2**20,
                   resolution: float = DEFAULT_RESOLUTION) -> int:
    """A batch in [start, limit] for which `try_batch` does not run out of memory, at most
    `resolution` (relative; 0 = exact) below the largest such batch."""
    if not 1 <= start <= limit:
        raise ValueError(f"need 1 <= start <= limit, got start={start}, limit={limit}")

    def fits(n: int) -> bool:
        oom = False
        try:
            try_batch(n)
        except Exception as e:
            if not is_oom(e):
                raise
            oom = True  # released below, outside the handler: the traceback holds the tensors
        release_memory()
        log.debug("batch %d %s", n, "out of memory" if oom else "fits")
        return not oom

    if not fits(start):
        raise UserError(f"even batch size {start} runs out of device memory; use a smaller model or preset")
    good, bad = start, None
    while bad is None and good < limit:
        n = min(good * 2, limit)
        if fits(n):
            good = n
        else:
            bad = n
    if bad is None:
        return good  # everything up to the limit fits
    while bad - good > max(1, int(good * resolution)):
        mid = (good + bad) // 2
        if fits(mid):
            good = mid
        else:
            bad = mid
    return good


def _autocast(device: torch.device, precision: str) -> Any:
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
    if dtype is None:
        return torch.autocast(device.type, enabled=False)
    return torch.autocast(device.type, dtype=dtype)


def _to(inputs: torch.Tensor | tuple[torch.Tensor, ...], device: torch.device) -> tuple[torch.Tensor, ...]:
    items = inputs if isinstance(inputs, tuple) else (inputs,)
    return tuple(t.to(device, non_blocking=True) for t in items)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def train_step_probe(model: nn.Module, make_batch: MakeBatch, precision: str, device: str | torch.device,
                     optimizer: str = "adamw") -> TryBatch:
    """A try_batch running one full training step (forward, backward, optimizer step) at batch n.

    The optimizer is created per try with lr=0, so its state is allocated as in training but the
    weights do not change; gradients and optimizer state are dropped after each try.
    """
    device = torch.device(device)
    model.to(device)

    def try_batch(n: int) -> None:
        was_training = model.training
        model.train()
        params = [p for p in model.parameters() if p.requires_grad]
        opt: torch.optim.Optimizer = (torch.optim.AdamW(params, lr=0.0) if optimizer == "adamw"
                                      else torch.optim.SGD(params, lr=0.0, momentum=0.9))
        try:
            inputs, labels = make_batch(n)
            inputs, labels = _to(inputs, device), labels.to(device)
            with _autocast(device, precision):
                logits = model(*inputs)
            loss = nn.functional.cross_entropy(logits.float(), labels)
            loss.backward()
            opt.step()
            _sync(device)
        finally:
            model.zero_grad(set_to_none=True)
            opt.state.clear()
            model.train(was_training)

    return try_batch


def infer_probe(model: nn.Module, make_batch: MakeBatch, precision: str, device: str | torch.device) -> TryBatch:
    """A try_batch running one forward pass at batch n under torch.inference_mode (no autograd state)."""
    device = torch.device(device)
    model.to(device)

    def try_batch(n: int) -> None:
        was_training = model.training
        model.eval()
        try:
            inputs, _ = make_batch(n)
            with torch.inference_mode(), _autocast(device, precision):
                model(*_to(inputs, device))
            _sync(device)
        finally:
            model.train(was_training)

    return try_batch


def max_batches(model: nn.Module, make_batch: MakeBatch, precision: str, device: str | torch.device,
                start: int = 1, limit: int = 2**20, optimizer: str = "adamw",
                allow_cpu: bool = False, resolution: float = DEFAULT_RESOLUTION) -> dict[str, Any]:
    """{"train": N, "infer": M, "ratio": M/N} for the same model and precision (record.memory.max_batch).

    Only meaningful on CUDA: a CPU process is killed by the OS rather than told it is out of
    memory, so CPU needs allow_cpu=True and a small `limit` (tests use that).
    """
    device = torch.device(device)
    if device.type != "cuda" and not allow_cpu:
        raise UserError("--find-max-batch needs a CUDA device (on a CPU the OS kills the process instead "
                        "of reporting out of memory); pass --device cuda")
    # cuDNN autotuning would benchmark every conv layer again at each new batch size (seconds per try at
    # batches of 10^5); heuristic algorithm choice is also what an untuned run would get
    benchmark, torch.backends.cudnn.benchmark = torch.backends.cudnn.benchmark, False
    try:
        train_n = find_max_batch(train_step_probe(model, make_batch, precision, device, optimizer), start, limit,
                                 resolution)
        infer_n = find_max_batch(infer_probe(model, make_batch, precision, device), start, limit, resolution)
    finally:
        torch.backends.cudnn.benchmark = benchmark
    return {"train": train_n, "infer": infer_n, "ratio": round(infer_n / train_n, 4),
            "precision": precision, "limit": limit, "resolution": resolution}
