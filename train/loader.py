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

    def __iter__(self) -> Iterator[list[int]]:
        import torch

        g = torch.Generator().manual_seed(self.seed * 1_000_003 + self.epoch)
        order = torch.randperm(self.n, generator=g)
        bs = min(self.batch_size, self.n)
        batches = [order[i * bs:(i + 1) * bs] for i in range(self.batches_total)]
        mine = batches[self.rank::self.world_size][: len(self)]
        for b in mine[self._skip:]:
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
