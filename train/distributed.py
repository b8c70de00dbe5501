"""Data-parallel training with torchrun and DistributedDataParallel (DDP).

The training loop stays single-process code; the CLI and train.loop.fit call a few functions here:

    with distributed.session(device) as dist_ctx:      # trainserve train: process group up, torn down on any exit
        fit(cfg, out_dir)                               # ranks > 0 train silently; only rank 0 writes
    # inside fit:
    dist_ctx = distributed.current()                    # rank and world size; batches sharded by train.loader
    forward = distributed.wrap(model, dist_ctx)         # DDP when world_size > 1
    distributed.after_step(model, dist_ctx, step)       # only with the sync-check debug hook on
    entry.update(distributed.epoch_means(dist_ctx, entry, keys))  # rank-mean train loss and accuracy
    distributed.finish(record, dist_ctx, timer.times, cfg)       # every rank's throughput into the record

`make_sampler`/`set_epoch` shard a map-style dataset the same way for callers that use a DataLoader
sampler instead of train.loader's index batches.

Without torchrun's environment (RANK, WORLD_SIZE, LOCAL_RANK) everything here is a no-op and the
context says rank 0 of 1. gloo serves CPU runs, NCCL CUDA runs; NCCL's NVLink multicast (NVLS)
and PyTorch's symmetric-memory multicast are always switched off.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from trainserve.core import envs
from trainserve.core.errors import UserError
from trainserve.core.profile import ProfileRecord
from trainserve.train.config import scaled_lr

log = logging.getLogger(__name__)

# Set in every GPU run's environment before NCCL starts: NVLink multicast stays off.
GPU_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1"}
# Debug hook: when "1", every rank checksums its parameters after each step and rank 0 compares.
CHECK_SYNC_ENV = envs.DDP_CHECK_SYNC.name


@dataclass
class DistContext:
    """Where this process stands in a data-parallel run (rank 0 of 1 when not launched by torchrun)."""

    rank: int = 0  # global rank, 0 .. world_size-1
    world_size: int = 1  # processes in the whole run, all nodes
    local_rank: int = 0  # rank on this node: picks the GPU
    backend: str | None = None  # "gloo" | "nccl", or None without a process group
    device: str = "cpu"  # "cpu" or "cuda:<local_rank>"
    sync_checks: int = 0  # steps whose parameters were compared across ranks (debug hook)
    sync_check: bool = field(default=False, repr=False)
    baseline_throughput: float | None = None  # samples/s of a 1-process run, for scaling efficiency
    shard: bool = False  # --shard: parameters, gradients and optimizer state split across the ranks (train/sharding.py)
    offload: bool = False  # --offload: the sharded state kept in host memory, the optimizer step on the CPU

    @property
    def distributed(self) -> bool:
        return self.backend is not None

    @property
    def is_writer(self) -> bool:
        """Only rank 0 writes artifacts (checkpoint, card, history, profile)."""
        return self.rank == 0

    def global_batch(self, per_rank_batch: int) -> int:
        return per_rank_batch * self.world_size

    def describe(self) -> dict[str, Any]:
        return {"world_size": self.world_size, "backend": self.backend, "rank": self.rank,
                "local_rank": self.local_rank, "parallelism": "fsdp2" if self.shard else "ddp", "offload": self.offload}


def launched_by_torchrun(environ: dict[str, str] | None = None) -> bool:
    env = os.environ if environ is None else environ
    return all(k in env for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK"))


def read_env(environ: dict[str, str] | None = None) -> tuple[int, int, int]:
    """(rank, world_size, local_rank) from torchrun's variables, validated."""
    env = os.environ if environ is None else environ
    try:
        rank, world, local = int(env["RANK"]), int(env["WORLD_SIZE"]), int(env["LOCAL_RANK"])
    except (KeyError, ValueError) as e:
        raise UserError(f"torchrun environment is incomplete or not integers ({e}); launch with torchrun "
                        "or trainserve train --nproc N") from None
    if world < 1 or not 0 <= rank < world or local < 0:
        raise UserError(f"torchrun environment RANK={rank} WORLD_SIZE={world} LOCAL_RANK={local} is "
                        "inconsistent; need 0 <= RANK < WORLD_SIZE and LOCAL_RANK >= 0")
    return rank, world, local


_CURRENT: DistContext | None = None


def current() -> DistContext:
    """The context `setup` made in this process (rank 0 of 1 when none was made)."""
    return _CURRENT if _CURRENT is not None else DistContext()


def setup(device: str) -> DistContext:
    """Join the process group when launched by torchrun; `device` is "cpu", "cuda" or "auto".

    Returns rank 0 of 1 (no process group) otherwise. The loop keeps using plain "cuda": the
    current CUDA device is set to this rank's GPU here.
    """
    global _CURRENT
    if not launched_by_torchrun():
        _CURRENT = DistContext(device="cuda:0" if device.startswith("cuda") else "cpu")
        return _CURRENT
    import torch
    import torch.distributed as dist

    rank, world, local = read_env()
    kind = "cuda" if device.startswith("cuda") or (device == "auto" and torch.cuda.is_available()) else "cpu"
    if kind == "cuda":
        os.environ.update(GPU_ENV)  # read by NCCL when the communicator is created, below
        if local >= torch.cuda.device_count():
            raise UserError(f"LOCAL_RANK={local} but this node has {torch.cuda.device_count()} GPU(s); "
                            "start at most one process per GPU (--nproc-per-node)")
        torch.cuda.set_device(local)
        backend, dev = "nccl", f"cuda:{local}"
    else:
        backend, dev = "gloo", "cpu"
    _watch_parent()
    kwargs: dict[str, Any] = {"backend": backend, "rank": rank, "world_size": world}
    if kind == "cuda":
        kwargs["device_id"] = torch.device(dev)  # binds NCCL eagerly to this rank's GPU
    dist.init_process_group(**kwargs)
    _CURRENT = DistContext(rank=rank, world_size=world, local_rank=local, backend=backend, device=dev,
                           sync_check=envs.DDP_CHECK_SYNC.get())
    if rank != 0:  # one voice: only rank 0 logs progress; the others report warnings and errors
        logging.getLogger().setLevel(max(logging.getLogger().level, logging.WARNING))
    log.debug("joined process group: %s", _CURRENT)
    return _CURRENT


def teardown(together: bool = False) -> None:
    """Leave the process group if one is up (safe to call twice, and after errors). `together`: wait for
    every rank first, so none tears down its connections while a peer is still using them (gloo then
    aborts that peer: "terminate called without an active exception")."""
    global _CURRENT
    _CURRENT = None
    try:
        import torch.distributed as dist
    except ImportError:  # pragma: no cover
        return
    if dist.is_available() and dist.is_initialized():
        if together and dist.get_world_size() > 1:
            dist.barrier()
        dist.destroy_process_group()


@contextlib.contextmanager
def session(device: str) -> Iterator[DistContext]:
    """`setup` then `teardown`, also when the body raises or is interrupted; after a normal end the
    ranks leave together (a rank that raised leaves at once: its peers are stopped by torchrun)."""
    ctx = setup(device)
    finished = False
    try:
        yield ctx
        finished = True
    finally:
        teardown(together=finished)


def _watch_parent() -> None:
    """Exit if torchrun (our parent) disappears, so no worker outlives a killed launcher.

    torchrun starts each worker in its own session, so a SIGKILL of torchrun would otherwise orphan it.
    """
    parent = os.getppid()

    def watch() -> None:
        while True:
            time.sleep(1.0)
            if os.getppid() != parent:
                log.error("launcher (pid %d) is gone; stopping this worker", parent)
                os._exit(3)

    threading.Thread(target=watch, name="ddp-parent-watch", daemon=True).start()


# --- data and model -----------------------------------------------------------------------------

def make_sampler(dataset: Any, ctx: DistContext, seed: int, shuffle: bool = True) -> Any | None:
    """A DistributedSampler giving each rank a disjoint 1/world_size of every epoch, or None alone.

    drop_last keeps every rank at the same number of steps (an uneven last step would hang DDP).
    The order depends only on (seed, epoch), so a resumed run sees the same batches.
    """
    if not ctx.distributed:
        return None
    from torch.utils.data.distributed import DistributedSampler

    if len(dataset) < ctx.world_size:
        raise UserError(f"the dataset has {len(dataset)} samples, fewer than the {ctx.world_size} processes; "
                        "use more data or fewer processes")
    return DistributedSampler(dataset, num_replicas=ctx.world_size, rank=ctx.rank, shuffle=shuffle,
                              seed=seed, drop_last=True)


def set_epoch(sampler: Any | None, epoch: int) -> None:
    """Call at the start of every epoch (also the first after a resume): reshuffles per epoch."""
    if sampler is not None and hasattr(sampler, "set_epoch"):
        sampler.set_epoch(epoch)


def wrap(model: Any, ctx: DistContext) -> Any:
    """Wrap in DistributedDataParallel when distributed; the model must already be on ctx.device. A sharded
    model (ctx.shard: already split by train/sharding.py) is its own data-parallel wrapper."""
    if not ctx.distributed or ctx.shard:
        return model
    from torch.nn.parallel import DistributedDataParallel

    device_ids = [ctx.local_rank] if ctx.device.startswith("cuda") else None
    # broadcast_buffers (default): BatchNorm running stats follow rank 0, so all ranks stay identical.
    return DistributedDataParallel(model, device_ids=device_ids)


def unwrap(model: Any) -> Any:
    """The plain module under DDP (and torch.compile), for state_dict and export."""
    inner = getattr(model, "module", None)
    if inner is not None and type(model).__name__ == "DistributedDataParallel":
        model = inner
    return getattr(model, "_orig_mod", model)


# --- cross-rank checks and statistics -----------------------------------------------------------

def params_digest(model: Any) -> str:
    """sha256 over every parameter and buffer's bytes, in state_dict order (bitwise identity)."""
    h = hashlib.sha256()
    for name, t in unwrap(model).state_dict().items():
        h.update(name.encode())
        h.update(t.detach().cpu().contiguous().view(-1).view(dtype=_byte_dtype()).numpy().tobytes())
    return h.hexdigest()


def _byte_dtype() -> Any:
    import torch

    return torch.uint8


def check_in_sync(model: Any, ctx: DistContext, step: int) -> None:
    """All ranks compare parameter digests; raises on every rank if any rank differs."""
    if not ctx.distributed or ctx.shard:  # sharded ranks hold different parts by design
        return
    digests = all_gather(ctx, params_digest(model))
    ctx.sync_checks += 1
    if len(set(digests)) != 1:
        raise RuntimeError(f"DDP ranks diverged at step {step}: parameter digests per rank {digests}")


def after_step(model: Any, ctx: DistContext, step: int) -> None:
    """The loop calls this after each optimizer step; runs the sync check when the debug hook is on."""
    if ctx.sync_check:
        check_in_sync(model, ctx, step)


def all_gather(ctx: DistContext, obj: Any) -> list[Any]:
    """One picklable object from every rank, in rank order (just [obj] alone)."""
    if not ctx.distributed:
        return [obj]
    import torch.distributed as dist

    out: list[Any] = [None] * ctx.world_size
    dist.all_gather_object(out, obj)
    return out


def rank_stats(ctx: DistContext, samples: int, window_s: float, peak_bytes: int | None,
               step_p50_ms: float | None = None) -> dict[str, Any]:
    """This rank's share of a run, for `gather_rank_stats`."""
    import socket

    return {
        "rank": ctx.rank,
        "local_rank": ctx.local_rank,
        "host": socket.gethostname(),
        "device": ctx.device,
        "samples": int(samples),
        "window_s": round(float(window_s), 4),
        "throughput_samples_s": round(samples / window_s, 3) if window_s > 0 else None,
        "peak_bytes": peak_bytes,
        "step_p50_ms": step_p50_ms,
    }


def summarize(ranks: list[dict[str, Any]], baseline_throughput: float | None = None) -> dict[str, Any]:
    """Aggregate throughput (all samples over the slowest rank's window) and scaling efficiency.

    efficiency = throughput_N / (N * throughput_1), against a 1-process run's throughput when given.
    """
    n = len(ranks)
    windows = [r["window_s"] for r in ranks if r.get("window_s")]
    total = sum(r["samples"] for r in ranks)
    aggregate = round(total / max(windows), 3) if windows else None
    peaks = [r["peak_bytes"] for r in ranks if r.get("peak_bytes") is not None]
    out: dict[str, Any] = {
        "world_size": n,
        "aggregate_throughput_samples_s": aggregate,
        "per_rank_throughput_min": min((r["throughput_samples_s"] or 0.0) for r in ranks) if ranks else None,
        "per_rank_throughput_max": max((r["throughput_samples_s"] or 0.0) for r in ranks) if ranks else None,
        "peak_bytes_max": max(peaks) if peaks else None,
        "baseline_throughput_samples_s": baseline_throughput,
        "scaling_efficiency": None,
        "speedup": None,
    }
    if baseline_throughput and aggregate:
        out["speedup"] = round(aggregate / baseline_throughput, 4)
        out["scaling_efficiency"] = round(aggregate / (n * baseline_throughput), 4)
    return out


def gather_rank_stats(ctx: DistContext, stats: dict[str, Any]) -> list[dict[str, Any]]:
    """Every rank's `rank_stats`, in rank order (a collective: all ranks must call it)."""
    return all_gather(ctx, stats)


def apply_to_record(record: Any, ctx: DistContext, ranks: list[dict[str, Any]], per_rank_batch: int,
                    baseline_throughput: float | None = None) -> None:
    """Put the per-rank figures and the aggregate into a ProfileRecord (rank 0 then saves it).

    The record's headline throughput becomes the whole run's; its batch size stays per rank.
    """
    summary = summarize(ranks, baseline_throughput)
    record.extra["ranks"] = ranks
    record.extra["ddp"] = {**ctx.describe(), **summary, "global_batch_size": ctx.global_batch(per_rank_batch),
                           "sync_checks": ctx.sync_checks}
    record.settings["world_size"] = ctx.world_size
    record.settings["global_batch_size"] = ctx.global_batch(per_rank_batch)
    if ctx.distributed and summary["aggregate_throughput_samples_s"] is not None:
        record.speed.throughput_samples_s = summary["aggregate_throughput_samples_s"]
        if summary["peak_bytes_max"] is not None:
            record.memory.peak_bytes = summary["peak_bytes_max"]


def epoch_means(ctx: DistContext, entry: dict[str, Any], keys: tuple[str, ...]) -> dict[str, Any]:
    """Rank-mean of a history entry's per-rank figures (train loss, accuracy); unchanged alone."""
    if not ctx.distributed:
        return {}
    rows = all_gather(ctx, {k: entry[k] for k in keys if entry.get(k) is not None})
    return {k: round(sum(r[k] for r in rows) / len(rows), 5) for k in rows[0]}


def finish(record: Any, ctx: DistContext, times: Any, cfg: Any) -> None:
    """Gather every rank's throughput and peak memory into `record` (a collective: all ranks call it).

    `times` is the loop's train.measure.StepTimes, `cfg` its TrainConfig.
    """
    stats = rank_stats(ctx, times.samples, times.total_s, record.memory.peak_bytes, record.speed.latency.p50_ms)
    ranks = gather_rank_stats(ctx, stats)
    apply_to_record(record, ctx, ranks, cfg.batch_size, ctx.baseline_throughput)
    record.settings["effective_lr"] = scaled_lr(cfg.lr, cfg.batch_size, ctx.world_size, cfg.lr_scale)


def baseline_throughput_from(path: Any) -> float:
    """The headline throughput of a 1-process run's profile.json (or its run's train folder)."""
    from pathlib import Path


    p = Path(path)
    if p.is_dir():
        p = p / "profile.json" if (p / "profile.json").exists() else p / "train" / "profile.json"
    rec = ProfileRecord.load(p)
    world = rec.settings.get("world_size", 1)
    if world != 1:
        raise UserError(f"{p} is a {world}-process run; a scaling baseline must be a 1-process run")
    if not rec.speed.throughput_samples_s:
        raise UserError(f"{p} records no throughput; re-run the 1-process baseline")
    return float(rec.speed.throughput_samples_s)
