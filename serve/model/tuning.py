"""Load-time choice of a CPU model's thread layout, by timing the model on its own shapes.

A CPU instance has two sessions: its pool (the instance's share of the cores as intra-op threads)
and a single-threaded twin. Which one is faster for a batch of n rows depends on the model and the
machine: waking a sleeping intra-op pool costs more than it saves on a tiny model's single row, and
a 1 GFLOP model on 16 cores answers a single row 5x faster with them all. So at load both sessions
run each power-of-two batch size from 1 up, with random inputs of the declared shapes, until the
pool wins; runs up to the last size the single thread won (by more than 5%) go to the twin. The
pool alone is timed at the largest batch too, so the log shows the whole layout.
"""

from __future__ import annotations

import logging
import statistics
import time
from dataclasses import dataclass, field

import numpy as np

log = logging.getLogger(__name__)

WARMUP_RUNS = 2  # untimed runs per session and batch size (first-run allocations, pool start-up)
MIN_RUNS = 3  # timed runs per session and batch size, at least ...
MAX_RUNS = 25  # ... and at most
POINT_BUDGET_S = 0.15  # timed runs stop once a session and batch size took this long, seconds
SINGLE_MARGIN = 0.95  # the twin must beat the pool by 5% (more than timing noise) to be worth its memory
TOTAL_BUDGET_S = 3.0  # the whole choice stops growing the batch after this long, seconds
# a one-row run at least this long (ms) makes the twin pointless: waking the pool costs microseconds, and
# timing both sessions (2 x (WARMUP_RUNS + MIN_RUNS) runs) would hold the server's start for many seconds
SLOW_RUN_MS = 50.0


@dataclass
class ThreadChoice:
    """What runs where on one CPU instance, and the timings that chose it."""

    pool_threads: int  # intra-op threads of the instance's main session
    small_batch_rows: int  # runs of up to this many rows go to the single-threaded session; 0 = none
    source: str  # "measured", "config" (config.pbtxt's small_batch_rows) or "fixed" (no twin to compare)
    timings_ms: dict[int, dict[str, float]] = field(default_factory=dict)  # rows -> {"pool": ms, "single": ms}

    def describe(self) -> str:
        """One line for the log and the served config: the choice and the numbers behind it."""
        rows = ", ".join(
            f"b{n}: " + " vs ".join(f"{k} {v:.3g} ms" for k, v in t.items()) for n, t in sorted(self.timings_ms.items()))
        where = (f"batches up to {self.small_batch_rows} row(s) on 1 thread, larger on {self.pool_threads}"
                 if self.small_batch_rows else f"every batch on {self.pool_threads} thread(s)")
        return f"{where} ({self.source}{'; ' + rows if rows else ''})"


def median_run_ms(session, feed: dict[str, np.ndarray], outputs: list[str]) -> float:
    """Median wall time of session.run on `feed`, ms, after WARMUP_RUNS untimed runs."""
    for _ in range(WARMUP_RUNS):
        session.run(outputs, feed)
    times: list[float] = []
    start = time.perf_counter()
    while len(times) < MAX_RUNS and (len(times) < MIN_RUNS or time.perf_counter() - start < POINT_BUDGET_S):
        t0 = time.perf_counter_ns()
        session.run(outputs, feed)
        times.append((time.perf_counter_ns() - t0) / 1e6)
    return statistics.median(times)


def random_feed(inputs, rows: int, rng: np.random.Generator, batched: bool = True,
                dynamic_dim: int | None = None) -> dict[str, np.ndarray]:
    """Random inputs in the declared shapes and dtypes (never zeros: zeros can run faster): dim 0 is
    `rows` when `batched`, a variable dimension is `dynamic_dim` (None: refused). ValueError for
    inputs random numbers cannot fill (text) or a variable dimension without `dynamic_dim`."""
    feed = {}
    for spec in inputs:  # serve.model.sessions.TensorSpec: shape with -1 for the batch dim when batched
        dims = spec.shape[1:] if batched else spec.shape
        if any(d < 0 for d in dims) and dynamic_dim is None:
            raise ValueError(f"input {spec.name!r} has a variable dimension {list(spec.shape)}; no shape to time")
        shape = ((rows,) if batched else ()) + tuple(dynamic_dim if d < 0 else d for d in dims)
        if spec.datatype == "BYTES":
            raise ValueError(f"input {spec.name!r} is a BYTES tensor, which random data cannot fill")
        if np.issubdtype(spec.dtype, np.floating):
            feed[spec.name] = rng.standard_normal(shape).astype(spec.dtype)
        elif spec.dtype == np.bool_:
            feed[spec.name] = rng.integers(0, 2, shape).astype(bool)
        elif np.issubdtype(spec.dtype, np.integer):
            feed[spec.name] = rng.integers(0, 10, shape).astype(spec.dtype)  # small: valid ids for any vocabulary
        else:
            raise ValueError(f"input {spec.name!r} has dtype {spec.dtype}, which random data cannot fill")
    return feed


def choose(pool, single, inputs, outputs: list[str], pool_threads: int, max_rows: int) -> ThreadChoice:
    """Time `single` against `pool` at 1, 2, 4, ... rows while the single thread wins (up to max_rows;
    max_rows 0: a model that does not batch, timed once on its declared shapes). A model whose first
    one-row run takes SLOW_RUN_MS or more keeps every batch on the pool, untimed further."""
    rng = np.random.default_rng(0)
    probe = random_feed(inputs, 1, rng, batched=max_rows > 0)
    t0 = time.perf_counter_ns()
    pool.run(outputs, probe)  # also the pool's first run: allocations, thread start-up
    first_ms = (time.perf_counter_ns() - t0) / 1e6
    if first_ms >= SLOW_RUN_MS:
        return ThreadChoice(pool_threads, 0, "measured", {1: {"pool": round(first_ms, 4)}})
    if max_rows <= 0:
        feed = random_feed(inputs, 1, rng, batched=False)
        t_pool, t_single = median_run_ms(pool, feed, outputs), median_run_ms(single, feed, outputs)
        return ThreadChoice(pool_threads, int(t_single < SINGLE_MARGIN * t_pool), "measured",
                            {1: {"pool": round(t_pool, 4), "single": round(t_single, 4)}})
    choice = ThreadChoice(pool_threads, 0, "measured")
    started = time.perf_counter()
    rows = 1
    while rows <= max_rows and time.perf_counter() - started < TOTAL_BUDGET_S:
        feed = random_feed(inputs, rows, rng)
        t_pool, t_single = median_run_ms(pool, feed, outputs), median_run_ms(single, feed, outputs)
        choice.timings_ms[rows] = {"pool": round(t_pool, 4), "single": round(t_single, 4)}
        if t_single >= SINGLE_MARGIN * t_pool:
            break
        choice.small_batch_rows = rows
        rows *= 2
    if max_rows > 1 and max_rows not in choice.timings_ms and time.perf_counter() - started < TOTAL_BUDGET_S:
        choice.timings_ms[max_rows] = {"pool": round(median_run_ms(pool, random_feed(inputs, max_rows, rng), outputs), 4)}
    return choice
