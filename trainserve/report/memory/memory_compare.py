"""Memory of training beside inference, like with like: per device, two figures per side, each counted
the same way on both sides, and a ratio only between figures of one kind.

- working set: the model's own bytes. Training: weights, gradients, optimizer state and activations at
  the training batch (the CUDA allocator's peak; on the CPU, torch's CPU allocator over a profiled
  step, train/memory.py). Inference: weights, the runtime's arena and activations at the same batch
  (one onnxruntime session's memory delta, serve/model/working_set.py, from `trainserve limits`).
- process total: everything the process held. CPU: the peak RSS of the training process and of the
  serving process. GPU: the device memory in use (NVML), CUDA contexts included, while each ran.

A figure measured another way (a CPU training record from before activations were counted, whose peak
is RSS growth) is left out with the reason, rather than set against a figure of another kind.
"""

from __future__ import annotations

from trainserve.core.bounds import is_limit
from trainserve.core.speedup import DEVICE_LABEL, DEVICES
from trainserve.core.speedup import ratio as _div
from trainserve.report.common.collect import Entry
from trainserve.report.common.sections import Column, MemoryCompare, MemoryFigure, MemoryRatios, MemorySide, ModelSection

WORKING_SET_SOURCES = {"cuda_allocator_peak_and_tensor_sizes": "the CUDA allocator's peak (tensor sizes for the parts)",
                       "torch_profiler_cpu_memory_and_tensor_sizes":
                           "torch's CPU allocator over one profiled step, plus weights and optimizer state"}
KINDS = ("working_set", "process_total")
PARTS = ("weights", "gradients", "optimizer", "activations")  # training's working set, in bytes each


def _figure(n: int | None, kind: str, how: str, batch: int | None, source: str | None) -> MemoryFigure | None:
    return None if n is None else MemoryFigure(bytes=int(n), kind=kind, how=how, batch_size=batch, source=source)


def _train(entries: list[Entry], view: Column | None, device: str) -> tuple[MemorySide, list[str]]:
    notes: list[str] = []
    if view is None:
        return MemorySide(working_set=None, process_total=None), notes
    record = next((e.record for e in entries if e.source == view.source), None)
    breakdown = (record.extra.get("memory_breakdown") or {}) if record is not None else {}
    src = breakdown.get("source") if isinstance(breakdown, dict) else None
    ws = None
    m = view.memory
    if src in WORKING_SET_SOURCES:
        ws = _figure(m.peak_bytes, "working_set", WORKING_SET_SOURCES[src], view.batch_size, view.source)
        if ws is not None:
            ws.parts = {k: getattr(m, f"{k}_bytes") for k in PARTS}
    else:
        notes.append(f"training working set on the {DEVICE_LABEL[device]} not counted in this record "
                     f"({src or 'no breakdown'}): re-run training to count activations")
    total = (_figure(m.gpu_mem_used_max_bytes, "process_total", "device memory in use (NVML), CUDA context "
                     "included", view.batch_size, view.source) if device == "cuda"
             else _figure(m.rss_peak_bytes, "process_total", "peak RSS of the training process",
                          view.batch_size, view.source))
    return MemorySide(working_set=ws, process_total=total), notes


def _infer_working_set(entries: list[Entry], device: str, batch: int | None) -> MemoryFigure | None:
    """The in-process limits' working set at the training batch (one session's delta, serve/model/working_set.py)."""
    if batch is None:
        return None
    for e in entries:
        r = e.record
        ws = r.extra.get("working_set") if isinstance(r.extra, dict) else None
        if is_limit(r) and r.device == device and r.batch_size == batch and isinstance(ws, dict) \
                and ws.get("bytes") is not None:
            return _figure(ws["bytes"], "working_set", ws.get("how") or "session delta", batch, e.source)
    for e in entries:  # a batch probed for its working set only (limits --working-set-batch: the training batch)
        r = e.record
        probed = r.extra.get("working_sets") if isinstance(r.extra, dict) else None
        if is_limit(r) and r.device == device and isinstance(probed, dict):
            n = (probed.get("bytes") or {}).get(str(batch))
            if n is not None:
                return _figure(n, "working_set", probed.get("how") or "session delta", batch, e.source)
    return None


def memory_compare(entries: list[Entry], section: ModelSection) -> dict[str, MemoryCompare]:
    """summary.json's models.<m>.memory_compare.<device>: {train, infer: {working_set, process_total}, ratios,
    notes}; ratios are training over inference, each only between two figures of its own kind."""
    out: dict[str, MemoryCompare] = {}
    for d in DEVICES:
        tv = section.train.get(d)
        served = section.server_column(d)
        if tv is None and served is None:
            continue
        train, notes = _train(entries, tv, d)
        batch = tv.batch_size if tv else None
        infer_ws = _infer_working_set(entries, d, batch)
        if tv is not None and infer_ws is None:
            notes.append(f"inference working set on the {DEVICE_LABEL[d]} at batch {batch} not measured: "
                         "run `trainserve limits` (its batches include the training batch when the model allows it)")
        total = None
        if served is not None:
            m = served.memory
            total = (_figure(m.gpu_mem_used_max_bytes, "process_total", "device memory in use (NVML), CUDA "
                             "context included", served.batch_size, served.source) if d == "cuda"
                     else _figure(m.rss_peak_bytes, "process_total", "peak RSS of the serving process",
                                  served.batch_size, served.source))
        infer = MemorySide(working_set=infer_ws, process_total=total)

        def ratio(kind: str) -> float | None:
            t, i = getattr(train, kind), getattr(infer, kind)
            return _div(t.bytes if t else None, i.bytes if i else None)

        out[d] = MemoryCompare(train=train, infer=infer,
                               ratios=MemoryRatios(working_set=ratio("working_set"),
                                                   process_total=ratio("process_total")), notes=notes)
    return out


