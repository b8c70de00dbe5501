"""Shared memory between a front-end process and the model process: one anonymous memfd arena per front end.

The model process creates the arena (memfd_create: a file with no name anywhere, so nothing can be left
in /dev/shm, even after SIGKILL; its pages are freed when the last process mapping it exits) and hands
the descriptor to the front end it starts. Both map it shared. The front end owns the allocator: for
each request it takes one block, writes the input tensors into it (the model process copies them out
on arrival) and leaves the rest of the block for the outputs, which the model process writes in place
when they fit (else they travel in the reply
message). The block is given back when the reply has been read, so the two sides never write the same
bytes at once.
"""

from __future__ import annotations

import mmap
import os

import numpy as np

ARENA_BYTES = 1 << 30  # virtual size of one front end's arena; only pages ever written take memory, bytes
MIN_BLOCK_SHIFT = 12  # the smallest block is a page (4 KiB)
ALIGN = 64  # tensors start on cache-line boundaries inside a block, bytes
RELEASE_BYTES = 1 << 20  # a freed block this large gives its memory back at once, bytes


def create_arena_fd(name: str, size: int = ARENA_BYTES) -> int:
    """A new memfd of `size` bytes (sparse: nothing is committed until written); close-on-exec."""
    fd = os.memfd_create(name, os.MFD_CLOEXEC)
    try:
        os.ftruncate(fd, size)
    except OSError:
        os.close(fd)
        raise
    return fd


def map_fd(fd: int, size: int) -> mmap.mmap:
    """Map a memfd shared and close the descriptor given (Python's mmap keeps a duplicate of its own,
    closed with the mapping)."""
    try:
        return mmap.mmap(fd, size)  # MAP_SHARED, read-write
    finally:
        os.close(fd)


def aligned(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


def view(mm: mmap.mmap, offset: int, dtype: str, shape: tuple[int, ...]) -> np.ndarray:
    """A numpy array over the arena's bytes at `offset` (no copy)."""
    return np.ndarray(shape, np.dtype(dtype), buffer=mm, offset=offset)


class Arena:
    """A front end's side of its arena: power-of-two blocks from a free list per size, else from the top.

    Blocks of one size are reused as requests come and go, so the memory written stays bounded by the
    largest number of requests in flight at once, each rounded up to a power of two.
    """

    def __init__(self, fd: int, size: int = ARENA_BYTES) -> None:
        self.mm = map_fd(fd, size)
        self.size = size
        self._top = 0
        self._free: dict[int, list[int]] = {}  # block size shift -> offsets of free blocks

    def alloc(self, nbytes: int) -> tuple[int, int] | None:
        """(offset, capacity) of a block of at least nbytes, or None when the arena is full."""
        shift = max(MIN_BLOCK_SHIFT, (max(nbytes, 1) - 1).bit_length())
        free = self._free.get(shift)
        if free:
            return free.pop(), 1 << shift
        cap = 1 << shift
        if self._top + cap > self.size:
            return None
        offset, self._top = self._top, self._top + cap
        return offset, cap

    def free(self, block: tuple[int, int]) -> None:
        offset, cap = block
        if cap >= RELEASE_BYTES:
            # a large block's pages go back to the system now (for both processes' mappings): a burst of
            # big requests must not keep its memory for the life of the front end
            self.mm.madvise(mmap.MADV_REMOVE, offset, cap)
        self._free.setdefault(cap.bit_length() - 1, []).append(offset)

    @property
    def high_water(self) -> int:
        """Bytes of the arena ever handed out (the most it can hold committed), bytes."""
        return self._top
