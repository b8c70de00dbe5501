"""Feeding batches: a seeded, resumable batch order, a DataLoader over in-memory arrays, CUDA prefetch.

The batch order of epoch `e` is a permutation drawn from a generator seeded with (seed, e), so a
resumed run sees exactly the batches the uninterrupted run would have; `rank`/`world_size` shard
it for data-parallel training (each rank takes every world_size-th batch of the same order).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np


class EpochBatches:
    """Index batches of one epoch (drop_last); `set_epoch` picks the order, `skip` resumes mid-epoch."""

    def __init__(self, n: int, batch_size: int, seed: int, rank: int = 0, world_size: int = 1) -> None:
        self.n, self.batch_size, self.seed = n, batch_size, seed
        self.rank, self.world_size = rank, world_size
        self.epoch, self._skip = 0, 0

    @property
    def batches_total(self) -> int:
        """Batches per epoch over all ranks (a set smaller than one batch gives one short batch)."""
        return max(1, self.n // self.batch_size)

    def __len__(self) -> int:
        return max(1, self.batches_total // self.world_size)

    def set_epoch(self, epoch: int, skip: int = 0) -> None:
        self.epoch, self._skip = epoch, skip

    def index_batches(self) -> list[Any]:
        """This rank's remaining index batches of the current epoch, as int64 tensors."""
        import torch

        g = torch.Generator().manual_seed(self.seed * 1_000_003 + self.epoch)
        order = torch.randperm(self.n, generator=g)
        bs = min(self.batch_size, self.n)
        batches = [order[i * bs:(i + 1) * bs] for i in range(self.batches_total)]
        return batches[self.rank::self.world_size][: len(self)][self._skip:]

    def __iter__(self) -> Iterator[list[int]]:
        for b in self.index_batches():
            yield b.tolist()


class ArrayBatches:
    """A map-style dataset indexed by a whole batch of indices: one fancy-index per batch, no collate."""

    def __init__(self, x: np.ndarray, y: np.ndarray) -> None:
        import torch

        self.x, self.y = torch.from_numpy(x), torch.from_numpy(y)

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, idx: list[int]) -> tuple[Any, Any]:
        import torch

        i = torch.as_tensor(idx)
        return self.x[i], self.y[i]


def make_loader(x: np.ndarray, y: np.ndarray, batches: EpochBatches, workers: int, pin_memory: bool) -> Any:
    import torch
    from torch.utils.data import DataLoader

    # its own generator: creating an iterator must not draw from the global RNG (resume exactness)
    return DataLoader(ArrayBatches(x, y), sampler=batches, batch_size=None, num_workers=workers,
                      generator=torch.Generator().manual_seed(batches.seed),
                      pin_memory=pin_memory, persistent_workers=workers > 0,
                      prefetch_factor=4 if workers > 0 else None)


def host_feed(num_workers: int | None, pin_memory: bool | None, device: str) -> tuple[int, bool]:
    """(workers, pin_memory) of a host-placed DataLoader: as given, else 0 workers and no pinning on a CPU (the
    arrays are in this process's memory) and on CUDA up to 4 workers (half the usable cores) and pinned memory."""
    from trainserve.core.procs import usable_cpus

    workers = num_workers if num_workers is not None else (min(4, usable_cpus() // 2) if device == "cuda" else 0)
    return workers, pin_memory if pin_memory is not None else device == "cuda"


PLACEMENTS = ("auto", "host", "device")
DEVICE_DATA_SHARE = 0.25  # auto keeps the training split on the GPU when it needs < this share of free memory


def choose_placement(requested: str, device: str, nbytes: int, workers_given: bool) -> str:
    """"device": the split lives where the model runs and batches are gathered there (no DataLoader,
    no host work per step beyond one gather); "host": DataLoader workers, pinned memory, async copies.

    auto picks device on CPU (the arrays are already in memory) and on CUDA when the split takes
    under a quarter of the free device memory; explicitly asked-for --workers keep the DataLoader."""
    if requested != "auto":
        return requested
    if workers_given:
        return "host"
    if device != "cuda":
        return "device"
    import torch

    free, _ = torch.cuda.mem_get_info()
    return "device" if nbytes < DEVICE_DATA_SHARE * free else "host"


class ResidentBatches:
    """The training split kept on `device` (the GPU, or plain CPU memory); each step is one gather.

    Same batch order as the DataLoader path (EpochBatches), so resume and DDP sharding behave
    identically. Per epoch the indices go to the device once; per step there are two index_select
    kernels and no host-device copy. CNN images are stored NHWC, so a gathered batch viewed as
    NCHW is already channels_last (no conversion kernel)."""

    def __init__(self, x: np.ndarray, y: np.ndarray, batches: EpochBatches, device: str,
                 channels_last: bool) -> None:
        import torch

        xt, yt = torch.from_numpy(x), torch.from_numpy(y)
        self.channels_last = channels_last and xt.dim() == 4
        if self.channels_last:
            xt = xt.permute(0, 2, 3, 1)
        self.x = xt.to(device).contiguous()
        self.y = yt.to(device)
        self.batches, self.device = batches, device
        self.nbytes = self.x.numel() * self.x.element_size() + self.y.numel() * self.y.element_size()

    def __iter__(self) -> Iterator[tuple[Any, Any]]:
        import torch

        idx = self.batches.index_batches()
        if not idx:
            return
        sizes = [len(b) for b in idx]
        flat = torch.cat(idx).to(self.device, non_blocking=False)
        start = 0
        for n in sizes:
            i = flat[start:start + n]
            start += n
            x = self.x.index_select(0, i)
            yield (x.permute(0, 3, 1, 2) if self.channels_last else x), self.y.index_select(0, i)


class DeviceFeed:
    """Moves host batches to the device. On CUDA the copy of batch i+1 runs on a side stream while
    step i computes (non_blocking from pinned memory), so host-to-device time hides behind compute."""

    def __init__(self, loader_iter: Iterator[Any], device: str, channels_last: bool) -> None:
        import torch

        self.it, self.device, self.channels_last = loader_iter, device, channels_last
        self.cuda = device == "cuda"
        self.stream = torch.cuda.Stream() if self.cuda else None
        self._next: tuple[Any, Any] | None = None
        if self.cuda:
            self._preload()

    def _to_device(self, x: Any, y: Any) -> tuple[Any, Any]:
        import torch

        x, y = x.to(self.device, non_blocking=True), y.to(self.device, non_blocking=True)
        if self.channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        return x, y

    def _preload(self) -> None:
        import torch

        try:
            x, y = next(self.it)
        except StopIteration:
            self._next = None
            return
        with torch.cuda.stream(self.stream):
            self._next = self._to_device(x, y)

    def __iter__(self) -> DeviceFeed:
        return self

    def __next__(self) -> tuple[Any, Any]:
        if not self.cuda:
            return self._to_device(*next(self.it))
        import torch

        if self._next is None:
            raise StopIteration
        current = torch.cuda.current_stream()
        current.wait_stream(self.stream)
        x, y = self._next
        x.record_stream(current)  # the caching allocator must not reuse them while compute reads them
        y.record_stream(current)
        self._preload()
        return x, y
