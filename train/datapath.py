"""The training data path at one (batch, precision): the host DataLoader as training feeds it, beside the
whole split resident on the device.

- **host**: a DataLoader over the split in host memory, with the workers and pinned memory `trainserve train`
  would use (train/loader.py `host_feed`), each batch copied with non_blocking copies on a side stream while
  the previous step computes (`DeviceFeed`);
- **device**: the split moved to the device once (`ResidentBatches`), each batch an index_select there.

Same model, optimizer, batch order and step on both; host samples/s over device samples/s says whether the
input pipeline limits training, and the host-side time per step spent in `next(feed)` says where it goes.
On a CPU "device" is the split as pre-materialised tensors: the comparison is the DataLoader's own cost.
The sweep (train/sweep.py) runs it at its best point.
"""

from __future__ import annotations

import gc
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from trainserve.core.speedup import ratio
from trainserve.train.config import TrainConfig
from trainserve.train.data import Splits, load_splits
from trainserve.train.device import grad_scaler
from trainserve.train.loader import DeviceFeed, EpochBatches, ResidentBatches, host_feed, make_loader
from trainserve.train.maxbatch import release_memory
from trainserve.train.measure import StepTimer
from trainserve.train.models import build_model
from trainserve.train.step import train_step
from trainserve.train.usercheck import model_config

PLACEMENTS = ("host", "device")
SPLIT_BATCHES = 16  # the split holds at most this many batches: timed steps seldom cross an epoch's end
SPLIT_MAX_BYTES = 512 * 2**20  # bytes: the split's cap, held in host memory and once more on the device
MIN_TIMED_STEPS = 3  # a side cut short at its deadline still has this many timed steps


@dataclass
class FeedRun:
    """One side of the comparison: how its batches were fed, and what training did with them."""

    placement: str  # "host" | "device"
    samples_s: float | None
    step_p50_ms: float | None
    data_wait_ms: float | None  # mean host-side time per timed step spent getting its batch (next(feed))
    data_wait_share: float | None  # of step time, 0..1
    timed_steps: int
    workers: int | None = None  # DataLoader worker processes (host side)
    pin_memory: bool | None = None  # host side


@dataclass
class DataPathResult:
    """Host DataLoader beside the split resident on the device, at one batch and precision."""

    device: str
    batch_size: int
    precision: str
    rows: int  # training rows in the split both sides iterate over
    runs: list[FeedRun] = field(default_factory=list)
    seconds: float = 0.0  # wall time of both sides, split and models included

    @property
    def host_over_device(self) -> float | None:
        by = {r.placement: r.samples_s for r in self.runs}
        return ratio(by.get("host"), by.get("device"))

    def to_dict(self) -> dict[str, Any]:
        """The form the sweep's best record (extra["data_path"]) and index.json carry."""
        out = asdict(self)
        out["host_over_device"] = self.host_over_device
        out["seconds"] = round(self.seconds, 3)
        return out


def split_rows(batch: int, row_bytes: int) -> int:
    """Rows of the split: SPLIT_BATCHES batches, within SPLIT_MAX_BYTES, and never less than one batch."""
    return max(batch, min(batch * SPLIT_BATCHES, SPLIT_MAX_BYTES // max(row_bytes, 1)))


def measure_data_path(base: TrainConfig, device: str, batch: int, precision: str, warmup_steps: int = 3,
                      timed_steps: int = 10, deadline: float | None = None) -> DataPathResult:
    """Train `warmup_steps + timed_steps` steps fed from the host, then as many from the device.

    `deadline` (time.monotonic()) cuts each side short after MIN_TIMED_STEPS timed steps.
    """
    t0 = time.monotonic()
    cfg = base.replace(device=device, precision=precision, batch_size=batch, warmup_steps=warmup_steps,
                       find_max_batch=False)
    model_cfg = model_config(cfg)
    probe = load_splits(model_cfg, cfg.dataset, 8, cfg.seed)
    rows = split_rows(batch, probe.x_train[:1].nbytes + probe.y_train[:1].nbytes)
    splits = load_splits(model_cfg, cfg.dataset, rows, cfg.seed)
    result = DataPathResult(device=device, batch_size=batch, precision=precision, rows=len(splits.x_train))
    for placement in PLACEMENTS:
        side_deadline = None if deadline is None else time.monotonic() + (deadline - time.monotonic()) / (
            len(PLACEMENTS) - len(result.runs))
        result.runs.append(_feed_run(cfg, splits, device, placement, timed_steps, side_deadline))
        release_memory()
    result.seconds = time.monotonic() - t0
    return result


class _Feed:
    """Batches for as many epochs as asked for: from a DataLoader through DeviceFeed, or resident."""

    def __init__(self, cfg: TrainConfig, splits: Splits, device: str, placement: str, channels_last: bool) -> None:
        self.batches = EpochBatches(len(splits.x_train), cfg.batch_size, cfg.seed)
        self.device, self.channels_last, self.epoch = device, channels_last, 0
        self.workers: int | None = None
        self.pin: bool | None = None
        self.loader: Any = None
        self.resident: ResidentBatches | None = None
        if placement == "device":
            self.resident = ResidentBatches(splits.x_train, splits.y_train, self.batches, device, channels_last)
        else:
            self.workers, self.pin = host_feed(cfg.num_workers, cfg.pin_memory, device)
            self.loader = make_loader(splits.x_train, splits.y_train, self.batches, self.workers, self.pin)
        self.it = self._epoch()

    def _epoch(self) -> Any:
        self.batches.set_epoch(self.epoch)
        if self.resident is not None:
            return iter(self.resident)
        return iter(DeviceFeed(iter(self.loader), self.device, self.channels_last))

    def next(self) -> tuple[Any, Any]:
        try:
            return next(self.it)
        except StopIteration:  # the epoch's end, as in training: the next epoch's order, the loader restarted
            self.epoch += 1
            self.it = self._epoch()
            return next(self.it)

    def close(self) -> None:
        self.it = self.loader = self.resident = None  # persistent DataLoader workers exit with their iterator
        gc.collect()


def _feed_run(cfg: TrainConfig, splits: Splits, device: str, placement: str, timed_steps: int,
              deadline: float | None) -> FeedRun:
    """One side: a fresh model, warm-up steps left out, then timed steps, each from asking for the batch to the
    end of the optimizer step (StepTimer), so a step that waits for its data is that much longer."""
    import torch

    channels_last = cfg.model == "cnn" and device == "cuda"  # as training does
    if device == "cuda":
        torch.backends.cudnn.benchmark = channels_last
    feed = _Feed(cfg, splits, device, placement, channels_last)
    torch.manual_seed(cfg.seed)
    model = build_model(splits.config)
    model = model.to(device, memory_format=torch.channels_last) if channels_last else model.to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.effective_lr, weight_decay=cfg.weight_decay,
                                  fused=device == "cuda")
    scaler = grad_scaler(device, cfg.precision)
    timer = StepTimer(device, cfg.warmup_steps)
    model.train()
    try:
        for step in range(cfg.warmup_steps + timed_steps):
            if deadline is not None and step >= cfg.warmup_steps + MIN_TIMED_STEPS and time.monotonic() > deadline:
                break
            timer.begin()
            x, y = feed.next()
            timer.fetched()
            train_step(model, model, torch.nn.functional.cross_entropy, x, y, optimizer, scaler,
                       scaler.is_enabled(), device, cfg.precision)
            optimizer.zero_grad(set_to_none=True)
            timer.end(len(y))
        timer.flush()
    finally:
        feed.close()
    t = timer.times
    n = len(t.step_ms)
    steps = sorted(t.step_ms)
    return FeedRun(placement=placement, samples_s=t.samples / t.total_s if t.total_s > 0 else None,
                   step_p50_ms=steps[n // 2] if n else None,
                   data_wait_ms=sum(t.data_wait_ms) / n if n else None, data_wait_share=t.data_wait_share,
                   timed_steps=n, workers=feed.workers, pin_memory=feed.pin)
