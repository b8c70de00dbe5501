"""Training memory: measuring it during a run (MemoryTracker), the measured breakdown, and an
analytic estimate from the parameter count.

The tracker counts weights, gradients and optimizer state from tensor sizes and reads the peak
(the CUDA allocator's; on CPU, torch's CPU allocator over one profiled warm-up step, see
cpu_step_peak_bytes, else the process RSS growth); activations and temporaries are what the peak
holds beyond the rest. torch and psutil are imported inside the tracker's methods, so the
arithmetic below stays importable without them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import sys
from collections.abc import Iterator
from typing import Any

from trainserve.core.meters import PROCESS_RSS, TORCH_ALLOCATOR
from trainserve.core.profile import Memory

# Bytes per element of the optimizer state per parameter (fp32 moments).
_OPTIMIZER_STATE = {
    "adamw": 8,  # exp_avg + exp_avg_sq, fp32
    "adam": 8,
    "sgd": 4,  # momentum buffer, fp32 (plain SGD without momentum keeps none: use "none")
    "none": 0,
}
_PRECISIONS = ("fp32", "tf32", "bf16", "fp16")


def analytic_estimate(n_params: int, precision: str, optimizer: str = "adamw",
                      autocast: bool = True) -> dict[str, Any]:
    """Bytes for weights, gradients, optimizer state and master weights, from the parameter count.

    With autocast (torch.autocast, what the training loop uses) parameters and gradients stay
    fp32 at every precision; the low-precision weight copies are per-op temporaries. Without it
    (a model cast to bf16/fp16) weights and gradients take 2 bytes and the optimizer keeps a
    4-byte fp32 master copy (16 bytes/param with Adam, as in the ZeRO paper).
    Activations are not estimated: they depend on the batch and the architecture.
    """
    if n_params < 0:
        raise ValueError(f"n_params={n_params} must be >= 0")
    if precision not in _PRECISIONS:
        raise ValueError(f"precision={precision!r} is not one of {', '.join(_PRECISIONS)}")
    opt = optimizer.lower()
    if opt not in _OPTIMIZER_STATE:
        raise ValueError(f"optimizer={optimizer!r} is not one of {', '.join(_OPTIMIZER_STATE)}")
    half = precision in ("bf16", "fp16") and not autocast
    per = {
        "weights": 2 if half else 4,
        "gradients": 2 if half else 4,
        "optimizer_state": _OPTIMIZER_STATE[opt],
        "master_weights": 4 if half else 0,
    }
    total_per = sum(per.values())
    if half:
        note = f"{precision} weights and gradients with an fp32 master copy; {opt} state in fp32"
    elif precision in ("bf16", "fp16"):
        note = f"autocast {precision}: fp32 weights (they are the master copy) and gradients; {opt} state in fp32"
    else:
        note = f"{precision} weights and gradients; {opt} state in fp32"
    return {
        "n_params": n_params,
        "precision": precision,
        "optimizer": opt,
        "bytes_per_param": {**per, "total": total_per},
        "weights_bytes": per["weights"] * n_params,
        "gradients_bytes": per["gradients"] * n_params,
        "optimizer_bytes": per["optimizer_state"] * n_params,
        "master_weights_bytes": per["master_weights"] * n_params,
        "total_bytes": total_per * n_params,
        "note": note + "; activations not included",
    }


def breakdown_from_measurements(weights: int, after_backward: int, after_step: int, peak: int,
                                reserved: int | None = None) -> dict[str, Any]:
    """A consistent breakdown from allocated bytes at four moments (all relative to the same baseline).

    weights: after moving the model to the device; after_backward: after the first backward
    (weights + gradients); after_step: after the first optimizer step, before zero_grad (weights +
    gradients + optimizer state); peak: max allocated during steady-state steps; reserved: the
    caching allocator's peak reservation. Parts never go negative; `consistent` says whether the
    parts sum to the peak within 5% (they can only miss it when a part had to be clamped).
    """
    for name, value in (("weights", weights), ("after_backward", after_backward),
                        ("after_step", after_step), ("peak", peak)):
        if value < 0:
            raise ValueError(f"{name}={value} bytes must be >= 0")
    notes: list[str] = []
    gradients = after_backward - weights
    if gradients < 0:
        notes.append(f"allocated fell by {-gradients} bytes from weights to after backward; gradients set to 0")
        gradients = 0
    optimizer = after_step - after_backward
    if optimizer < 0:
        notes.append(f"allocated fell by {-optimizer} bytes over the optimizer step; optimizer state set to 0")
        optimizer = 0
    activations = peak - weights - gradients - optimizer
    if activations < 0:
        notes.append(f"peak is {-activations} bytes below weights+gradients+optimizer; activations set to 0")
        activations = 0
    total = weights + gradients + optimizer + activations
    return {
        "weights_bytes": int(weights),
        "gradients_bytes": int(gradients),
        "optimizer_bytes": int(optimizer),
        "activations_bytes": int(activations),  # activations and temporaries
        "peak_bytes": int(peak),
        "cuda_allocated_peak_bytes": int(peak),
        "cuda_reserved_peak_bytes": None if reserved is None else int(reserved),
        "sum_bytes": int(total),
        "consistent": (total == peak) if peak == 0 else abs(total - peak) <= 0.05 * peak,
        "notes": notes,
    }


def fill_memory(memory: Memory, breakdown: dict[str, Any]) -> None:
    """Copy a breakdown's fields that the profile record's Memory has (the rest stays in extra)."""
    names = {f.name for f in dataclasses.fields(Memory)}
    for key, value in breakdown.items():
        if key in names:
            setattr(memory, key, value)


# --- measuring during a run -------------------------------------------------------------------

@contextlib.contextmanager
def _quiet_fd2() -> Iterator[None]:
    """File descriptor 2 to /dev/null for a moment (native code writes there, past sys.stderr)."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "wb") as null:
            os.dup2(null.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def cpu_step_peak_bytes(fn: Any) -> tuple[Any, int | None]:
    """Run fn() under torch's profiler with CPU memory tracking; (fn's result, the most bytes the CPU
    allocator held above what it held when fn started), or None when the profiler recorded no allocation.

    The profiler reports every allocation and free of torch's CPU allocator ("[memory]" events with their
    signed sizes), so the running sum over the step is its live working memory: gradients as backward
    makes them, activations saved for backward, temporaries. RSS cannot show this: freed blocks stay in
    the process, and small models fit in memory the process already holds."""
    import json
    import tempfile

    from torch.profiler import ProfilerActivity, profile

    prof = profile(activities=[ProfilerActivity.CPU], profile_memory=True)
    with _quiet_fd2():  # the profiler's native start line on stderr, in the middle of the progress display
        prof.__enter__()
    try:
        out = fn()
    finally:
        with _quiet_fd2():
            prof.__exit__(None, None, None)
    fd, path = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    try:
        prof.export_chrome_trace(path)
        with open(path) as f:
            events = json.load(f).get("traceEvents", [])
    finally:
        os.unlink(path)
    live = peak = 0
    seen = False
    for e in events:  # in the order the allocator reported them
        args = e.get("args") or {}
        if e.get("name") == "[memory]" and args.get("Device Type") == 0 and isinstance(args.get("Bytes"), int):
            seen = True
            live += args["Bytes"]
            peak = max(peak, live)
    return out, (peak if seen else None)


def tensor_bytes(tensors: Any) -> int:
    """Bytes this process holds of an iterable of tensors (None entries skipped; a sharded tensor's local part)."""
    total = 0
    for t in tensors:
        if t is not None:
            t = t.to_local() if callable(getattr(t, "to_local", None)) else t
            total += t.numel() * t.element_size()
    return total


def optimizer_state_bytes(optimizer: Any) -> int:
    import torch

    return sum(tensor_bytes(v for v in st.values() if isinstance(v, torch.Tensor)) for st in optimizer.state.values())


class MemoryTracker:
    """Peak memory of training: CUDA allocator peaks, or growth of the process RSS on CPU.

    On CUDA the breakdown comes from allocated bytes at four moments (after model.to, after the
    first backward, after the first optimizer step, and the peak), see breakdown_from_measurements; on CPU, where
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
        self.cpu_step_peak: int | None = None  # CPU: bytes allocated above a steady step's start (profiled)
        self.offload = False  # FSDP2 --offload: weights, gradients and optimizer state counted above live on the host
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

    def _fill_offloaded(self, memory: Any) -> dict[str, Any]:
        """--offload: the card holds none of the state for good, only the units gathered for the moment, the
        activations and the gradients before their copy to the host; the host's share is named apart."""
        host = {"weights_bytes": self.weights, "gradients_bytes": self.gradients, "optimizer_bytes": self.optimizer}
        self.weights = self.gradients = self.optimizer = 0
        self.offload = False
        try:
            details = self.fill(memory)
        finally:
            self.weights, self.gradients, self.optimizer = (host["weights_bytes"], host["gradients_bytes"],
                                                            host["optimizer_bytes"])
            self.offload = True
        details["host_state_bytes"] = host
        details["notes"] = [*details.get("notes", []), "--offload: weights, gradients and optimizer state live in host "
                            "memory (host_state_bytes); the GPU's parts are 0 and its peak is the gathered units, "
                            "activations and gradients in flight"]
        return details

    def fill(self, memory: Any) -> dict[str, Any]:
        """Write the peaks and breakdown into a trainserve.core.profile.Memory; returns the breakdown details."""
        self.sample()
        memory.rss_peak_bytes = self.rss_peak
        memory.rss_growth_bytes = max(0, self.rss_peak - self.rss_base)
        parts_known = None not in (self.weights, self.gradients, self.optimizer)
        if self.device == "cuda" and self.offload and parts_known:
            return self._fill_offloaded(memory)
        if self.device == "cuda" and parts_known:
            import torch

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
            memory.peak_meter, memory.peak_device = TORCH_ALLOCATOR, f"cuda:{torch.cuda.current_device()}"
            memory.activations_bytes = max(0, memory.peak_bytes - known)
            return {"source": "cuda_allocator_peak_and_tensor_sizes", "notes": []}
        if self.cpu_step_peak is not None and parts_known:
            # the same accounting as the CUDA allocator's peak: what lived at a steady step's start (weights,
            # optimizer state; gradients were set to None) plus the most the step allocated on top
            memory.peak_bytes = self.weights + self.optimizer + self.cpu_step_peak
            memory.peak_meter, memory.peak_device = "torch profiler's CPU memory + tensor sizes", "cpu"
            memory.activations_bytes = max(0, memory.peak_bytes - known)
            return {"source": "torch_profiler_cpu_memory_and_tensor_sizes", "step_peak_bytes": self.cpu_step_peak,
                    "notes": ["CPU working set: weights and optimizer state from tensor sizes plus the peak bytes "
                              "torch's CPU allocator held above them during one profiled warm-up step"]}
        memory.peak_bytes = memory.rss_growth_bytes
        memory.peak_meter, memory.peak_device = f"{PROCESS_RSS}, growth over training", "cpu"
        memory.activations_bytes = max(0, memory.peak_bytes - known)
        return {"source": "rss_growth_and_tensor_sizes",
                "notes": ["CPU peak is the process RSS growth over training; it includes allocator and library caches "
                          "(no profiled step: it needs warmup_steps >= 2)"]}
