"""Figures checked against each other before a run is called VALID.

Each record's own flags (report/verdict/verdict.py) cannot see a figure that contradicts another. These checks
can, each failing as a reason of its own kind:

- `memory_parts`: a memory peak below the sum of its parts (weights, gradients, optimizer state,
  activations): the peak and the parts were counted by different meters;
- `meter_device`: a record carrying a meter of another device (a CPU record with NVML power, energy or
  GPU memory): the figure is that device's, not the record's;
- `memory_unpaired`: a memory comparison with a working set missing on one side and no reason given;
- `client_unsaid`: a closed-loop ramp bounded by "a plateau" whose users did not keep their requests in
  flight (Little's law): the client held them, and the bound must say so;
- `version_unknown`: a record that does not say which trainserve wrote it.
"""

from __future__ import annotations

from typing import Any

from trainserve.core.bounds import is_limit
from trainserve.core.served import IN_FLIGHT_FRACTION, BoundKind, in_flight
from trainserve.core.servedparts import LoadParts
from trainserve.core.version import UNINSTALLED
from trainserve.report.common.collect import Entry
from trainserve.report.common.sections import ModelSection

KINDS = ("memory_parts", "meter_device", "memory_unpaired", "client_unsaid", "version_unknown")
PARTS_SLACK = 1.01  # the parts are tensor sizes, the peak an allocator's: a rounding's worth of difference is not one
GPU_METERS = ("nvml",)


def reasons(entries: list[Entry], models: dict[str, ModelSection]) -> list[dict[str, Any]]:
    """Every cross-check that fails: [{"kind", "source", "message"}]."""
    out: list[dict[str, Any]] = []
    for e in entries:
        for kind, message in _record(e):
            out.append({"kind": kind, "source": e.source, "message": message})
    for name, section in models.items():
        for device, cmp in section.memory_compare.items():
            if not all(side.working_set or side.process_total for side in (cmp.train, cmp.infer)):
                continue  # one side not measured on this device at all: nothing is compared
            for side in ("train", "infer"):
                figure = getattr(cmp, side).working_set
                word = "training" if side == "train" else "inference"
                if figure is None and not any(n.startswith(word) for n in cmp.notes):
                    out.append({"kind": "memory_unpaired", "source": None,
                                "message": f"{name} on {device}: the memory comparison has no {word} working set "
                                           "and no reason why"})
    return out


def _record(e: Entry) -> list[tuple[str, str]]:
    r = e.record
    out: list[tuple[str, str]] = []
    m = r.memory
    parts = [m.weights_bytes, m.gradients_bytes, m.optimizer_bytes, m.activations_bytes]
    known = [p for p in parts if p is not None]
    if m.peak_bytes is not None and known and sum(known) > m.peak_bytes * PARTS_SLACK:
        out.append(("memory_parts", f"memory peak {m.peak_bytes:,} B is below the sum of its parts ({sum(known):,} B: "
                                    "weights, gradients, optimizer state, activations): the two were counted by "
                                    "different meters"))
    if r.device == "cpu":
        carried = [name for name, present in (
            (f"{r.energy.source} energy", r.energy.source in GPU_METERS and r.energy.mean_power_w is not None),
            ("GPU utilization", r.utilization.gpu_util_mean_percent is not None),
            ("GPU memory used", r.utilization.gpu_mem_used_max_bytes is not None)) if present]
        if carried:
            out.append(("meter_device", f"a CPU record carries the GPU's meters ({', '.join(carried)}): those figures "
                                        "are the GPU's, not the CPU's"))
    if r.phase == "infer" and not is_limit(r) and isinstance(r.extra, dict):
        out += _ramp(r)
    if (r.versions or {}).get("trainserve") == UNINSTALLED:
        out.append(("version_unknown", f"the record does not say which trainserve wrote it (version {UNINSTALLED}: "
                                       "neither installed nor in a git checkout)"))
    return out


def _ramp(r) -> list[tuple[str, str]]:
    served = r.served
    bound = served.bound if served is not None else None
    parts = LoadParts.of(r)
    rows = parts.ramp
    if bound is None or bound.kind != BoundKind.PLATEAU or not rows:
        return []
    users = parts.saturation.users if parts.saturation is not None else None
    i = next((k for k, row in enumerate(rows) if row.users == users), len(rows) - 1)
    last = rows[min(i + 1, len(rows) - 1)]
    n = in_flight(last)
    if n is None or not last.users or n >= IN_FLIGHT_FRACTION * last.users:
        return []
    return [("client_unsaid", f"the ramp's bound says a plateau, but its {last.users} closed-loop users kept only "
                              f"{n:.1f} requests in flight: the client held them back")]
