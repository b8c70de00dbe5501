"""Inference's side of the memory frontier (train/frontier.py): one exported model's working set at one batch.

A fresh onnxruntime session is built as the server builds one and run once on the batch; its working set is
what the process holds after the run minus before the session (serve/model/working_set.py: weights, the arena
grown to this batch, the activations within it). The first call on a device first runs a throwaway session,
so no point carries what the runtime makes once per process (the CUDA context; on the CPU its thread pools
and allocator, ~10 MiB, measured as the first point's excess).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from trainserve.serve.model.sessions import _make_session
from trainserve.serve.model.working_set import working_set_by_batch

_warm: set[str] = set()  # devices whose runtime context this process already made


def session_working_set(path: Path, feeds: dict[str, Any], device: str) -> int:
    """Bytes the session of `path` holds after one run on `feeds` (raises what onnxruntime raised)."""
    batch = len(next(iter(feeds.values())))
    threads = max(1, min(4, os.cpu_count() or 1))

    def make() -> Any:
        return _make_session(Path(path), device, threads, 1)

    if device not in _warm:
        working_set_by_batch(make, {batch: feeds}, device)
        _warm.add(device)
    got = working_set_by_batch(make, {batch: feeds}, device)
    if batch not in got:
        raise RuntimeError(f"the {device} process memory could not be read (NVML lists no process memory here)")
    return got[batch]
