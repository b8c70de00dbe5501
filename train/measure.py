"""Measuring a training loop cheaply: step times, time waiting for data, and memory.

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


def tensor_bytes(tensors: Any) -> int:
    """Bytes held by an iterable of tensors (None entries skipped)."""
    return sum(t.numel() * t.element_size() for t in tensors if t is not None)


def optimizer_state_bytes(optimizer: Any) -> int:
    import torch

    return sum(tensor_bytes(v for v in st.values() if isinstance(v, torch.Tensor)) for st in optimizer.state.values())


class MemoryTracker:
    """Peak memory of training: CUDA allocator peaks, or growth of the process RSS on CPU.

    On CUDA the breakdown comes from allocated bytes at four moments (after model.to, after the
    first backward, after the first optimizer step, and the peak), via train.memory; on CPU, where
    RSS also holds library caches, weights/gradients/optimizer state are counted from tensor sizes.
    Activations and temporaries are the peak minus those three.
    """

    def __init__(self, device: str) -> None:
        import psutil

        self.device = device
        self._proc = psutil.Process()
        self.rss_base = self._proc.memory_info().rss  # bytes, before the model exists
        self.rss_peak = self.rss_base
        self.weights = self.gradients = self.optimizer = None  # bytes, from tensor sizes
        self._cuda_at: dict[str, int] = {}  # allocated bytes at moments, relative to the baseline
        self.use_moments = True  # False on resume: the optimizer state is loaded before the first step
        self._cuda_base = 0
        if device == "cuda":
            import torch

            torch.cuda.reset_peak_memory_stats()
            self._cuda_base = torch.cuda.memory_allocated()

    def moment(self, name: str) -> None:
        """Record allocated CUDA bytes now ("weights", "after_backward", "after_step"); no-op on CPU."""
        if self.device == "cuda":
            import torch

            self._cuda_at[name] = torch.cuda.memory_allocated() - self._cuda_base

    def sample(self) -> None:
        """CPU only: one RSS reading (~20 us); CUDA peaks come from the allocator for free."""
        if self.device == "cpu":
            rss = self._proc.memory_info().rss
            if rss > self.rss_peak:
                self.rss_peak = rss

    def current_bytes(self) -> int:
        if self.device == "cuda":
            import torch

            return torch.cuda.memory_allocated()
        return self._proc.memory_info().rss

    def fill(self, memory: Any) -> dict[str, Any]:
        """Write the peaks and breakdown into a trainserve.core.profile.Memory; returns the breakdown details."""
        self.sample()
        memory.rss_peak_bytes = self.rss_peak
        memory.rss_growth_bytes = max(0, self.rss_peak - self.rss_base)
        parts_known = None not in (self.weights, self.gradients, self.optimizer)
        if self.device == "cuda" and parts_known:
            import torch

            from trainserve.train.memory import breakdown_from_measurements, fill_memory

            # Parts from tensor sizes (exact); the allocator's readings at the first step's moments also
            # hold the input batches, logits and loss, so they only cross-check. Activations and
            # temporaries = peak - parts, so the parts sum to torch's measured peak.
            w, g, o = self.weights, self.gradients, self.optimizer
            peak = torch.cuda.max_memory_allocated() - self._cuda_base
            b = breakdown_from_measurements(w, w + g, w + g + o, peak, torch.cuda.max_memory_reserved())
            fill_memory(memory, b)
            at = self._cuda_at if self.use_moments else {}
            other = {name: at[name] - expected for name, expected in
                     (("weights", w), ("after_backward", w + g), ("after_step", w + g + o)) if name in at}
            return {"source": "cuda_allocator_peak_and_tensor_sizes", "consistent": b["consistent"],
                    "sum_bytes": b["sum_bytes"], "peak_bytes": b["peak_bytes"], "notes": b["notes"],
                    "allocated_at_moments_bytes": dict(at),
                    # live bytes beyond the parts at each moment: batches on the device, logits, loss
                    "other_live_at_moments_bytes": other}
        memory.weights_bytes, memory.gradients_bytes, memory.optimizer_bytes = self.weights, self.gradients, self.optimizer
        known = sum(b for b in (self.weights, self.gradients, self.optimizer) if b is not None)
        if self.device == "cuda":
            import torch

            memory.cuda_allocated_peak_bytes = torch.cuda.max_memory_allocated() - self._cuda_base
            memory.cuda_reserved_peak_bytes = torch.cuda.max_memory_reserved()
            memory.peak_bytes = memory.cuda_allocated_peak_bytes
            memory.activations_bytes = max(0, memory.peak_bytes - known)
            return {"source": "cuda_allocator_peak_and_tensor_sizes", "notes": []}
        memory.peak_bytes = memory.rss_growth_bytes
        memory.activations_bytes = max(0, memory.peak_bytes - known)
        return {"source": "rss_growth_and_tensor_sizes",
                "notes": ["CPU peak is the process RSS growth over training; it includes allocator and library caches"]}
