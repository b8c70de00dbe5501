"""Where each served operating point's latency goes, and what bounded each figure (record.served).

Adds to a model's section `attribution`: one entry per served operating point (a plain load
record, or one step of a load ramp) with the mean latency split into the client's own time, network,
the server's front end, queue and compute, and the point's bound; and `capacity_bounds`: one per
ramp, the capacity within the SLO and what bounded it. Their sentences are in report/common/sentences.py.
"""

from __future__ import annotations

from typing import Any

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
        ramp = r.extra.get("ramp") if isinstance(r.extra.get("ramp"), list) else []
        base = {"source": e.source, "device": r.device, "backend": r.backend, "batch_size": r.batch_size}
        if not ramp:
            a = served.attribution
            points.append(AttributionPoint(
                **base, label=_label(r.device, r.batch_size, r.concurrency), requests_s=r.speed.requests_s,
                p99_ms=r.speed.latency.p99_ms,
                attribution=None if a is None else Split(**a.parts(), latency_ms=a.latency_ms, server_ms=a.server_ms,
                                                         consistent=a.consistent, note=a.note,
                                                         mean_batch=a.mean_batch),
                bound=_bound(served.bound), client_saturated=served.client.saturated))
            continue
        for row in ramp:
            a = row.get("attribution")
            points.append(AttributionPoint(
                **base, label=_label(r.device, r.batch_size, row.get("users")) + " (ramp)",
                requests_s=row.get("requests_s"), p99_ms=row.get("p99_ms"),
                attribution=None if not a else Split(**{k: a.get(f"{k}_ms") for k in PART_LABELS},
                                                     latency_ms=a.get("latency_ms"), server_ms=a.get("server_ms"),
                                                     consistent=a.get("consistent", True), note=a.get("note", ""),
                                                     mean_batch=a.get("mean_batch")),
                bound=row.get("bound"), client_saturated=bool((row.get("client_cpu") or {}).get("saturated"))))
        sat = r.extra.get("saturation") or {}
        capacity.append(CapacityBound(**base, requests_s=sat.get("requests_s"), users=sat.get("users"),
                                      slo_p99_ms=r.settings.get("slo_p99_ms"), bound=_bound(served.bound)))
    return points, capacity


def bound_of(record: Any, point: dict[str, Any] | None) -> dict[str, str] | None:
    """The bound of a record's own figure, or of one ramp step."""
    if point is not None:
        b = point.get("bound")
        return {"kind": b["kind"], "detail": b["detail"]} if isinstance(b, dict) and "kind" in b else None
    return _bound(record.served.bound) if record.served is not None else None


def _label(device: str, batch: int, users: int | None) -> str:
    who = "open loop" if users is None else f"{users} user{'s' if users != 1 else ''}"
    return f"{DEVICE_LABEL[device]} · batch {batch} · {who}"


def _bound(b: Any) -> dict[str, str] | None:
    return None if b is None else {"kind": b.kind, "detail": b.detail}


