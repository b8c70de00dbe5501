"""Giving memory back after a flood: glibc keeps freed heap memory for reuse, so a burst of large
request bodies (1,500 batch-64 requests hold ~1.2 GB at once) would leave the server's RSS near its
peak for good (measured: 1,126 MiB after a flood from 137 MiB idle). `trim` hands the heap's free pages
back (glibc's malloc_trim); the server calls it when it is idle after having served. Linux with glibc
only; elsewhere a no-op.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys


def _libc():
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError:
        return None
    return libc if hasattr(libc, "malloc_trim") else None  # glibc, not musl


_LIBC = _libc()


def trim() -> bool:
    """Return the heap's free memory to the system; True when some was returned."""
    return bool(_LIBC is not None and _LIBC.malloc_trim(0) == 1)
