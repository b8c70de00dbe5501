"""Where each served operating point's latency goes, and what bounded each figure (record.served).

Adds to a model's section `attribution`: one entry per served operating point (a plain load
record, or one step of a load ramp) with the mean latency split into the client's own time, network,
the server's front end, queue and compute, and the point's bound; and `capacity_bounds`: one per
ramp, the capacity within the SLO and what bounded it. Their sentences are in report/common/sentences.py.
"""

from __future__ import annotations

from typing import Any

from trainserve.core.served import Attribution
from trainserve.core.servedparts import LoadParts, RampStep
from trainserve.core.speedup import DEVICE_LABEL
from trainserve.report.common.collect import Entry
from trainserve.report.common.sections import AttributionPoint, CapacityBound, Split

PART_LABELS = {"client": "client's own time", "network": "network and the rest", "frontend": "server front end",
               "queue": "server queue", "compute": "server compute"}


def attribution_section(entries: list[Entry]) -> tuple[list[AttributionPoint], list[CapacityBound]]:
    """(attribution: one per served point, capacity_bounds: one per ramp) for a model's served (non-limit) entries."""
    points: list[AttributionPoint] = []
    capacity: list[CapacityBound] = []
    for e in entries:
        r, served = e.record, e.record.served
        if served is None:
            continue
        parts = LoadParts.of(r)
        base = {"source": e.source, "device": r.device, "backend": r.backend, "batch_size": r.batch_size}
        if not parts.ramp:
            a = served.attribution
            points.append(AttributionPoint(
                **base, label=_label(r.device, r.batch_size, r.concurrency), requests_s=r.speed.requests_s,
                p99_ms=r.speed.latency.p99_ms, attribution=_split(a), bound=_bound(served.bound),
                client_saturated=served.client.saturated))
            continue
        for row in parts.ramp:
            points.append(AttributionPoint(
                **base, label=_label(r.device, r.batch_size, row.users) + " (ramp)",
                requests_s=row.requests_s, p99_ms=row.p99_ms, attribution=_split(row.attribution),
                bound=_bound(row.bound), client_saturated=bool(row.client_cpu and row.client_cpu.saturated)))
        sat = parts.saturation
        # the p99 the figure was held to; an older record says it in its settings only
        slo = served.slo_p99_ms if served.slo_p99_ms is not None else parts.settings.slo_p99_ms
        capacity.append(CapacityBound(**base, requests_s=None if sat is None else sat.requests_s,
                                      users=None if sat is None else sat.users, slo_p99_ms=slo,
                                      bound=_bound(served.bound)))
    return points, capacity


def bound_of(record: Any, point: RampStep | None) -> dict[str, str] | None:
    """The bound of a record's own figure, or of one ramp step."""
    if point is not None:
        return _bound(point.bound)
    return _bound(record.served.bound) if record.served is not None else None


def _label(device: str, batch: int, users: int | None) -> str:
    who = "open loop" if users is None else f"{users} user{'s' if users != 1 else ''}"
    return f"{DEVICE_LABEL[device]} · batch {batch} · {who}"


def _split(a: Attribution | None) -> Split | None:
    return None if a is None else Split(**a.parts(), latency_ms=a.latency_ms, server_ms=a.server_ms,
                                        consistent=a.consistent, note=a.note, mean_batch=a.mean_batch)


def _bound(b: Any) -> dict[str, str] | None:
    return None if b is None else {"kind": b.kind, "detail": b.detail}


