"""trainserve.serve.heap.trim gives freed heap memory back to the system (Linux with glibc)."""

from __future__ import annotations

import psutil
import pytest

from trainserve.serve import heap


@pytest.mark.skipif(heap._LIBC is None, reason="malloc_trim is glibc's (Linux)")
def test_trim_returns_freed_heap_memory():
    proc = psutil.Process()
    # many mid-sized blocks (below glibc's mmap threshold, so they live in the heap), then all freed
    blocks = [bytearray(100_000) for _ in range(3000)]  # ~300 MB
    for b in blocks:
        b[::4096] = b"x" * len(b[::4096])  # touch every page
    held = proc.memory_info().rss
    last = blocks[-1]  # alive at the top of the heap: free() alone cannot shrink the heap below it
    del blocks
    before_trim = proc.memory_info().rss
    assert before_trim > held - 100 * 2**20  # freed, but still this process's memory
    heap.trim()
    after = proc.memory_info().rss
    assert after < held - 200 * 2**20, (held >> 20, before_trim >> 20, after >> 20)
    del last


def test_trim_is_harmless_where_there_is_no_glibc(monkeypatch):
    monkeypatch.setattr(heap, "_LIBC", None)
    assert heap.trim() is False
