"""Training toward a held-out accuracy (`trainserve train --target-accuracy A`): when to stop, and what
it took to get there.

The loop evaluates on the test split at the end of every epoch; the first evaluation at or above A
stops the run. Time and energy run from just before the first step to the end of that evaluation,
so they include evaluation and checkpointing, as a user waiting for the model would count them.
Energy is the difference of the sampler's cumulative counters (NVML for cuda, RAPL for cpu) over
that span; without a counter it stays null.
"""

from __future__ import annotations

import time
from typing import Any

from trainserve.core.profile import TimeToAccuracy


class AccuracyTarget:
    """start() before the first step; check() after each epoch's evaluation; result() for the record."""

    def __init__(self, target: float, device: str, sampler: Any | None = None) -> None:
        self.target, self.device, self.sampler = target, device, sampler
        self._t0 = 0.0
        self._e0: float | None = None
        self._out = TimeToAccuracy(target_accuracy=target)

    @property
    def reached(self) -> bool:
        return self._out.reached

    def start(self) -> None:
        self._t0 = time.perf_counter()
        self._e0 = self._energy_j()

    def check(self, epoch: int, step: int, accuracy: float | None) -> bool:
        """After epoch `epoch` (1-based) at optimizer step `step`: True the first time `accuracy` >= target."""
        r = self._out
        if r.reached:  # the figures stay those of the eval that reached it
            return False
        r.epochs_run = epoch
        if accuracy is not None:
            r.test_accuracy = accuracy
        if accuracy is None or accuracy < self.target:
            return False
        r.reached = True
        r.time_to_accuracy_s = round(time.perf_counter() - self._t0, 4)
        r.epochs_to_accuracy, r.steps_to_accuracy = epoch, step
        e1 = self._energy_j()
        if self._e0 is not None and e1 is not None:
            r.energy_to_accuracy_j = round(e1 - self._e0, 4)
            r.energy_source = "nvml" if self.device == "cuda" else "rapl"
        return True

    def result(self) -> TimeToAccuracy:
        return self._out

    def _energy_j(self) -> float | None:
        """The cumulative energy counter of this device (joules), or None where there is none."""
        if self.sampler is None:
            return None
        s = self.sampler.reading()
        return s.gpu_energy_j if self.device == "cuda" else s.cpu_energy_j
