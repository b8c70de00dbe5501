"""Inference's working set at each batch size: what one onnxruntime session adds to its process.

A fresh session is built and run once at each batch size, smallest first; after each run the process's
memory (RSS on the CPU, the process's device memory from NVML on a GPU) minus what it held just before
the session was built is the session's working set at that batch: its weights, the runtime's arena
(which grows to the largest batch run so far and keeps that size) and the activations within it. That is
the same accounting as training's working set (weights, gradients, optimizer state, activations), so the
report may set the two side by side at one batch size. The process total (RSS, device memory with the
CUDA context) is the other figure, and the two are never compared with each other.

On a GPU the probe should run after another session of the process made the CUDA context, or the
first delta includes it; measure_model runs it last there (and first on the CPU, within the budget). On the CPU, freed heap memory is given back
(glibc's malloc_trim) before the baseline, so a session cannot hide in memory an earlier one freed.
"""

from __future__ import annotations

import ctypes
import gc
import logging
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)

HOW = {"cpu": "session delta: process RSS after one run at the batch minus before the session was built",
       "cuda": "session delta: the process's device memory (NVML) after one run at the batch minus before the "
               "session was built (the CUDA context already existed)"}
# NVML lists no process of another PID namespace (most containers): the device's used memory is the meter
# then, right while nothing else runs on the device (trainserve run measures limits before it serves)
HOW_DEVICE_WIDE = ("session delta: the device's used memory (NVML, device-wide: no per-process figure in this "
                   "container) after one run at the batch minus before the session was built (the CUDA context "
                   "already existed)")


def _trim_heap() -> None:
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc: the baseline may include freed heap, noted in HOW
        pass


def process_bytes(device: str, device_id: int = 0) -> int | None:
    """RSS on the CPU; this process's device memory on a GPU (None when NVML cannot say)."""
    if device == "cuda":
        from trainserve.core.telemetry import gpu_process_memory_bytes

        used = gpu_process_memory_bytes(device_id)
        # 0: NVML does not list this process (another PID namespace, as in many containers), and a process
        # holding a CUDA context never uses 0 bytes: unknown, not zero
        return used or None
    import psutil

    return int(psutil.Process().memory_info().rss)


def device_bytes(device_id: int = 0) -> int | None:
    """The whole device's used memory (NVML): the fallback meter where NVML lists no process."""
    from trainserve.core.telemetry import gpu_memory_used_bytes

    return gpu_memory_used_bytes(device_id)


def working_set_by_batch(make_session: Callable[[], Any], feeds: dict[int, dict[str, Any]], device: str,
                         device_id: int = 0) -> dict[int, int]:
    """{batch: bytes} for each batch of `feeds`, ascending, from one fresh session (empty when unmeasurable)."""
    return measure_working_set(make_session, feeds, device, device_id)[0]


def measure_working_set(make_session: Callable[[], Any], feeds: dict[int, dict[str, Any]], device: str,
                        device_id: int = 0) -> tuple[dict[int, int], str]:
    """working_set_by_batch's {batch: bytes}, and how they were counted (HOW's, or HOW_DEVICE_WIDE)."""
    _trim_heap()
    meter: Callable[[], int | None] = lambda: process_bytes(device, device_id)  # noqa: E731
    how = HOW[device]
    base = meter()
    if base is None and device == "cuda":
        meter, how = (lambda: device_bytes(device_id)), HOW_DEVICE_WIDE  # noqa: E731
        base = meter()
    if base is None:
        return {}, how
    return _by_batch(make_session, feeds, meter, base), how


def _by_batch(make_session: Callable[[], Any], feeds: dict[int, dict[str, Any]], meter: Callable[[], int | None],
              base: int) -> dict[int, int]:
    sess = make_session()
    outputs = [o.name for o in sess.get_outputs()]
    out: dict[int, int] = {}
    try:
        for batch in sorted(feeds):
            sess.run(outputs, feeds[batch])
            now = meter()
            if now is None:
                break
            out[batch] = max(0, now - base)
    finally:
        del sess
    return out
