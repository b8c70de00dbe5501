"""Giving memory back, and taking it without stalling.

Giving memory back after a flood: glibc keeps freed heap memory for reuse, so a burst of large
request bodies (1,500 batch-64 requests hold ~1.2 GB at once) would leave the server's RSS near its
peak for good (measured: 1,126 MiB after a flood from 137 MiB idle). `trim` hands the heap's free pages
back (glibc's malloc_trim); the server calls it when it is idle after having served. Linux with glibc
only; elsewhere a no-op.

Request buffers that a refused or failed request leaves in a reference cycle (an exception's traceback
holds the frame that holds the body) are freed only by a full garbage collection, which an idle server
rarely runs: two refused 1 GiB gzip bodies kept 600 MiB, twelve refused 59 MiB gRPC requests 1.4 GiB.
`Reclaimer` collects and trims once the server is idle and its RSS has grown since the last time.

Huge pages: numpy asks for transparent huge pages for large arrays, and the kernel zeroes each 2 MiB
page at its first write, inside the recv of the event loop that receives a body: eleven slow 60 MiB
bodies held another client's requests up to 4.3 s. `no_huge_pages` turns them off for the process.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import logging
import os
import sys
import time

log = logging.getLogger(__name__)

PR_SET_THP_DISABLE = 41  # prctl option (linux/prctl.h), Linux 3.15+
PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
GROWTH_BYTES = 16 << 20  # RSS grown by this much since the last collection: collect and trim again, bytes


def _libc():
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError:
        return None
    return libc if hasattr(libc, "malloc_trim") else None  # glibc, not musl


def _prctl():
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


_LIBC = _libc()
_PRCTL = _prctl()


def trim() -> bool:
    """Return the heap's free memory to the system; True when some was returned."""
    return bool(_LIBC is not None and _LIBC.malloc_trim(0) == 1)


def no_huge_pages() -> bool:
    """Turn transparent huge pages off for this process and its children; True when the kernel agreed."""
    if _PRCTL is None:
        return False
    ok = _PRCTL(PR_SET_THP_DISABLE, 1, 0, 0, 0) == 0
    if not ok:
        log.debug("prctl(PR_SET_THP_DISABLE) failed: errno %d", ctypes.get_errno())
    return ok


def rss_bytes() -> int:
    """This process's resident memory, bytes (0 where /proc is absent)."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * PAGE
    except (OSError, ValueError, IndexError):
        return 0


class Reclaimer:
    """Collect cycles and trim the heap when RSS stands above its lowest level since start: call `maybe()`
    while idle. A reclaim that frees nothing (the memory is in use: a grown arena, a request in flight)
    is retried after a back-off that doubles up to MAX_BACKOFF_S, so garbage left by the last of a series of
    requests is collected within 2 s of it. The objects alive when the Reclaimer is made (the loaded server:
    modules, models, sessions) are frozen out of the collector first, so a full collection scans only what
    came after (a few thousand objects, not ~76,000), and an idle server whose RSS grew for good pays little
    for the retries."""

    MAX_BACKOFF_S = 2.0

    def __init__(self, growth_bytes: int = GROWTH_BYTES, clock=time.monotonic) -> None:
        gc.freeze()  # the startup's objects live as long as the server: no collection needs to look at them
        self.growth_bytes = growth_bytes
        self.clock = clock
        self.floor = rss_bytes()  # the lowest RSS seen right after a reclaim (or at start)
        self.backoff_s = 0.0
        self.next_at = 0.0
        self.reclaims = 0

    def maybe(self) -> bool:
        """Reclaim if RSS stands growth_bytes above the floor and no back-off holds; True when it ran."""
        rss = rss_bytes()
        if rss - self.floor < self.growth_bytes or self.clock() < self.next_at:
            return False
        gc.collect()  # a full collection: the cycles a refused request left hold its buffers
        trim()
        after = rss_bytes()
        self.reclaims += 1
        log.debug("reclaim: RSS %d -> %d MiB", rss >> 20, after >> 20)
        self.floor = min(self.floor, after)
        if rss - after >= self.growth_bytes:
            self.backoff_s = 0.0
        else:
            self.backoff_s = min(max(2 * self.backoff_s, 1.0), self.MAX_BACKOFF_S)
        self.next_at = self.clock() + self.backoff_s
        return True
