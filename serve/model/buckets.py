"""Batch-size buckets: run a batch of n rows padded to the smallest bucket >= n.

Why: onnxruntime's CUDA provider pays for every change of input shape between two runs of a session,
not only for the first run of a shape: a run with the batch size cycling through sizes already seen
costs tens of times a run at one fixed size (`benchmarks/serve_bench.py`, `offline.shape_switching`;
figures: `git show aa232bf:docs/BENCHMARKS.md`, the small-request stalls on the GPU). A dynamic batcher under load changes the size
at almost every run, so small requests stall behind those runs. The fix here: pad each batch to a few sizes (powers of two by default) and give each size its own session
per instance (`bucket_sessions`), so that no session ever sees its shape change; every bucket runs
once at load (warm-up), so no request pays a first run either. On a GPU a few padded rows cost next
to nothing; on a CPU they cost their full compute, so buckets are opt-in there.

config.pbtxt, as a Triton-style parameter:
  parameters { key: "batch_buckets" value { string_value: "pow2" } }      # 1, 2, 4, ... max_batch_size
  parameters { key: "batch_buckets" value { string_value: "1,8,32,64" } }  # these sizes
  parameters { key: "batch_buckets" value { string_value: "none" } }       # run every size as it comes
  parameters { key: "bucket_sessions" value { string_value: "false" } }    # buckets share one session
Defaults: on CUDA "pow2" with a session per bucket (while the buckets' copies of the weights stay
within serve.model.sessions.BUCKET_SESSIONS_MAX_BYTES per instance); on the CPU "none". A batch larger than the largest
bucket runs unpadded on the instance's general session.
"""

from __future__ import annotations

import bisect

import numpy as np

OFF = ("", "none", "off", "0")


def parse_buckets(value: str, max_batch_size: int) -> list[int]:
    """Sorted bucket sizes from the parameter's text; [] when off. ValueError says what is wrong."""
    text = value.strip().lower()
    if text in OFF:
        return []
    if max_batch_size <= 0:
        raise ValueError("batch_buckets needs max_batch_size > 0 (a model without a batch dimension has one shape)")
    if text == "pow2":
        sizes, b = [], 1
        while b < max_batch_size:
            sizes.append(b)
            b *= 2
        return sizes + [max_batch_size]
    try:
        sizes = sorted({int(s) for s in text.split(",") if s.strip()})
    except ValueError:
        raise ValueError(f"batch_buckets is {value!r}; use 'pow2', 'none' or a comma-separated list of sizes") from None
    bad = [s for s in sizes if not 1 <= s <= max_batch_size]
    if bad or not sizes:
        raise ValueError(f"batch_buckets {value!r} has size(s) {bad or value!r} outside 1..{max_batch_size} "
                         "(max_batch_size)")
    return sizes


def bucket_for(buckets: list[int], rows: int) -> int:
    """The smallest bucket >= rows; rows itself when no bucket is that large (or there are none)."""
    i = bisect.bisect_left(buckets, rows)
    return buckets[i] if i < len(buckets) else rows


def pad_rows(a: np.ndarray, size: int) -> np.ndarray:
    """`a` grown to `size` rows along axis 0 with zero rows (a new array); `a` itself if already that size."""
    n = a.shape[0]
    if n >= size:
        return a
    out = np.empty((size, *a.shape[1:]), dtype=a.dtype)
    out[:n] = a
    out[n:] = 0
    return out
