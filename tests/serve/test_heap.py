"""trainserve.serve.engine.heap.trim gives freed heap memory back to the system (Linux with glibc)."""

from __future__ import annotations

import psutil
import pytest

from trainserve.serve.engine import heap


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


def test_reclaimer_collects_cycles_when_rss_grew_and_backs_off_when_nothing_frees(monkeypatch):
    rss = {"now": 100 << 20}
    monkeypatch.setattr(heap, "rss_bytes", lambda: rss["now"])
    monkeypatch.setattr(heap, "trim", lambda: True)
    collected = []
    monkeypatch.setattr(heap.gc, "collect", lambda: collected.append(1) or 0)
    monkeypatch.setattr(heap.gc, "freeze", lambda: None)
    clock = {"t": 0.0}
    r = heap.Reclaimer(growth_bytes=16 << 20, clock=lambda: clock["t"])
    assert not r.maybe() and not collected  # at its floor: nothing to do
    rss["now"] = 400 << 20  # a refused request's body, in a cycle
    real_collect = collected.append

    def frees():
        real_collect(1)
        rss["now"] = 101 << 20

    monkeypatch.setattr(heap.gc, "collect", frees)
    assert r.maybe() and rss["now"] == 101 << 20 and r.backoff_s == 0
    # memory in use (a request in flight): the collection frees nothing, the next try waits 1 s, then 2 s
    monkeypatch.setattr(heap.gc, "collect", lambda: collected.append(1) or 0)
    rss["now"] = 300 << 20
    assert r.maybe() and r.backoff_s == 1.0
    assert not r.maybe()  # within the back-off
    clock["t"] = 1.0
    assert r.maybe() and r.backoff_s == 2.0
    clock["t"] = 3.0
    assert r.maybe() and r.backoff_s == 2.0  # capped: garbage is found within 2 s of the last request
