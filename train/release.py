"""Whether a training run gave the GPU's memory back (issue: "GPU release"), measured with NVML.

`before()` reads the device's used memory before the run touches the GPU; `finish()` runs after
the model, optimizer and batches are freed: it empties torch's caching allocator and reads again.
What the process still holds then is its CUDA context, the kernels loaded so far and the cuBLAS /
cuDNN handles: returned only when the process exits (benchmarks/train_bare.py measures that).
`gpu_released` is true when torch holds no device memory any more (nothing leaked, the cache is
empty) and NVML shows no more than that process-lifetime overhead.
"""

from __future__ import annotations

import gc
from typing import Any

from trainserve.core.telemetry import gpu_memory_used_bytes

# What a CUDA process holds until exit (context, loaded modules, library handles), bytes. NVML
# typically shows 0.5 GB for the context of a recent driver and torch; beyond this is a leak.
PROCESS_OVERHEAD_LIMIT = 2 << 30


def before(requested_device: str) -> int | None:
    """NVML used bytes of GPU 0 now, or None where CUDA is not requested or NVML is missing."""
    if requested_device not in ("cuda", "auto"):
        return None
    return gpu_memory_used_bytes(0)


def finish(record: Any, before_bytes: int | None) -> dict[str, Any]:
    """Free torch's cached blocks, read NVML, fill record.memory.gpu_released/gpu_held_bytes."""
    import torch

    import sys

    if "torch._dynamo" in sys.modules:
        sys.modules["torch._dynamo"].reset()  # compiled graphs keep references to the model's tensors
    gc.collect()  # reference cycles (autograd graphs, compiled wrappers) can still hold tensors
    torch.cuda.synchronize()
    clear = getattr(torch._C, "_cuda_clearCublasWorkspaces", None)
    if clear is not None:
        clear()  # cuBLAS workspaces live in the caching allocator as allocated blocks
    torch.cuda.empty_cache()
    allocated, reserved = torch.cuda.memory_allocated(), torch.cuda.memory_reserved()
    after = gpu_memory_used_bytes(0)
    info: dict[str, Any] = {"nvml_used_before_bytes": before_bytes, "nvml_used_after_free_bytes": after,
                            "torch_allocated_after_bytes": allocated, "torch_reserved_after_bytes": reserved}
    if before_bytes is not None and after is not None:
        held = max(0, after - before_bytes)
        info["process_overhead_bytes"] = max(0, held - reserved)  # context, kernels, library handles
        record.memory.gpu_held_bytes = held
        record.memory.gpu_released = reserved == 0 and held - reserved <= PROCESS_OVERHEAD_LIMIT
        info["note"] = ("held = NVML after freeing minus NVML before the run; the process's CUDA context and "
                        "loaded kernels stay until it exits")
    record.extra["gpu_release"] = info
    return info
