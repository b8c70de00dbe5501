"""Timing a training loop cheaply: step times and time waiting for data (memory: train.memory).

Step time runs from asking for the batch to the end of the optimizer step, so it includes any
wait for data. On CUDA it is timed with CUDA events on the compute stream (resolved once per
epoch, so the host never stalls the GPU); `sync=True` synchronises after every step instead.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any


@dataclass
class StepTimes:
    """Per-step wall times (ms) and host data-wait times (ms) after warm-up, and the warm-up count."""

    step_ms: list[float] = field(default_factory=list)
    data_wait_ms: list[float] = field(default_factory=list)
    warmup_excluded: int = 0
    samples: int = 0  # samples inside the measured steps
    host_cpu_s: float = 0.0  # main-thread CPU seconds inside the measured steps (launching, feeding)

    @property
    def host_cpu_ms_per_step(self) -> float | None:
        """Host CPU per step; near the step time means the GPU waits on Python (host-bound)."""
        return self.host_cpu_s / len(self.step_ms) * 1e3 if self.step_ms else None

    @property
    def total_s(self) -> float:
        return sum(self.step_ms) / 1000.0

    @property
    def data_wait_share(self) -> float | None:
        total = sum(self.step_ms)
        return sum(self.data_wait_ms) / total if total > 0 else None


class StepTimer:
    """begin() before fetching a batch, fetched() when it is on the device, end() after the step."""

    def __init__(self, device: str, warmup_steps: int, sync: bool = False) -> None:
        self.device, self.warmup, self.sync = device, warmup_steps, sync
        self.events = device == "cuda" and not sync
        self.times = StepTimes()
        self._seen = 0  # steps begun in this process
        self._pending: list[tuple[Any, Any, float, int]] = []  # CUDA events not yet resolved
        self._t0 = self._tf = self._c0 = 0.0
        self._ev0: Any = None
        self._ev_end: Any = None  # the previous step's end event, reused as the next begin

    def begin(self) -> None:
        self._t0 = time.perf_counter()
        self._c0 = time.thread_time()
        if self.events:
            if self._ev_end is not None:  # back-to-back steps: the last step's end event starts this one
                self._ev0, self._ev_end = self._ev_end, None
                return
            import torch

            self._ev0 = torch.cuda.Event(enable_timing=True)
            self._ev0.record()

    def fetched(self) -> None:
        self._tf = time.perf_counter()

    def end(self, batch: int) -> None:
        wait_ms = (self._tf - self._t0) * 1000.0
        measured = self._seen >= self.warmup
        self._seen += 1
        if measured:
            self.times.host_cpu_s += time.thread_time() - self._c0
        if self.events:
            import torch

            ev1 = torch.cuda.Event(enable_timing=True)
            ev1.record()
            self._ev_end = ev1
            if measured:
                self._pending.append((self._ev0, ev1, wait_ms, batch))
            else:
                self.times.warmup_excluded += 1
            return
        if self.device == "cuda":
            import torch

            torch.cuda.synchronize()
        if measured:
            self._add((time.perf_counter() - self._t0) * 1000.0, wait_ms, batch)
        else:
            self.times.warmup_excluded += 1

    def flush(self) -> None:
        """Resolve pending CUDA events (one synchronisation); call at epoch end, outside timed steps."""
        self._ev_end = None  # whatever runs next (eval, checkpoint) is not part of the next step
        if not self._pending:
            return
        self._pending[-1][1].synchronize()
        for ev0, ev1, wait_ms, batch in self._pending:
            self._add(ev0.elapsed_time(ev1), wait_ms, batch)
        self._pending.clear()

    def _add(self, step_ms: float, wait_ms: float, batch: int) -> None:
        self.times.step_ms.append(step_ms)
        self.times.data_wait_ms.append(min(wait_ms, step_ms))
        self.times.samples += batch
