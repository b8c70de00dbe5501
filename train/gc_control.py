"""Garbage collection around the training steps, the way large training loops handle it.

Python's cyclic collector runs when allocations pile up, wherever the program is. A full (gen-2)
collection walks every tracked object, and with torch imported and a run built that is hundreds of
thousands of objects: one landing inside a step idles the GPU for the whole collection. Short runs
mostly collect during setup, eval and teardown; a longer run crosses the full-collection threshold
inside the steps too (figures: docs/BENCHMARKS.md, "GC pauses in fit"). So, for the steps only
(torchtitan does much the same):

- everything alive when training starts is moved out of the collector's view (`gc.freeze`), so a
  later collection never walks it;
- automatic collection is off; the young generations are collected every `every` steps (a fraction of a
  millisecond each), counted in the step they delay;
- on the way out the frozen objects are handed back and the previous state restored.

Reference cycles made during training live until the next periodic collection; nothing is leaked.
"""

from __future__ import annotations

import gc
import time

DEFAULT_EVERY_STEPS = 200


class StepGC:
    """`start()` before the first step, `after_step(step)` after each, `stop()` in a finally."""

    def __init__(self, every: int = DEFAULT_EVERY_STEPS) -> None:
        if every < 1:
            raise ValueError(f"every={every} must be >= 1")
        self.every = every
        self.collections = 0
        self.pause_s = 0.0  # time in the periodic collections, seconds
        self._was_enabled = True
        self._started = False

    def start(self) -> None:
        self._was_enabled = gc.isenabled()
        # The young generations only: a full collection here would walk everything torch loaded, a
        # noticeable pause for a short run; old garbage that gets frozen is only held until stop().
        gc.collect(1)
        gc.freeze()
        gc.disable()
        self._started = True

    def stop(self) -> None:
        if not self._started:
            return
        self._started = False
        gc.unfreeze()
        if self._was_enabled:
            gc.enable()

    def after_step(self, step: int) -> None:
        if step % self.every == 0:
            t0 = time.perf_counter()
            gc.collect(1)
            self.pause_s += time.perf_counter() - t0
            self.collections += 1

    def summary(self) -> dict[str, float | int]:
        return {"every_steps": self.every, "collections": self.collections,
                "pause_ms_total": round(self.pause_s * 1e3, 3),
                "pause_ms_mean": round(self.pause_s * 1e3 / self.collections, 3) if self.collections else None}
