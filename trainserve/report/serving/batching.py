"""Two comparisons the README promises beyond the side-by-side table, as typed sections.

- **Dynamic batching on and off**: on each device, the Server scenario (the highest Poisson rate within the
  p99 SLO) of the model as exported (`<m>_cpu`, its dynamic_batching) beside the same model with batching off
  (`<m>_cpu_nobatch`: max_batch_size 1, no dynamic_batching).
  Both are also offered one open-loop rate (`extra["shared_rate"]`, written by trainserve run), so their p50 and
  p99 stand side by side at the same load.
- **Data path**: each training record's placement (host: DataLoader, pinned memory, async copies; device:
  the split resident on the device) and the share of step time it waited for data, and the sweep's comparison of
  the two at its best point (train/datapath.py).

The batching-off and shared-rate records are kept out of every other figure (scenarios, saturated columns, cost): they
measure a server configured to be worse on purpose.
"""

from __future__ import annotations

from trainserve.core.bounds import NOBATCH_SUFFIX
from trainserve.core.profile import ProfileRecord
from trainserve.core.servedparts import LoadParts
from trainserve.core.speedup import DEVICES
from trainserve.core.speedup import ratio as _div
from trainserve.report.common.collect import Entry
from trainserve.report.common.sections import BatchingCompare, BatchingSide, DataPath, DataPathPoint, SharedRate
from trainserve.report.serving.scenarios import scenario_of

PLACEMENTS = ("host", "device")


def is_nobatch(record: ProfileRecord) -> bool:
    """A load record of a model served with batching off (`trainserve export` writes `<m>_<kind>_nobatch`)."""
    return record.model.rsplit("/", 1)[-1].endswith(NOBATCH_SUFFIX)


def is_shared_rate(record: ProfileRecord) -> bool:
    """One side of the shared-rate pair: batching on or off, offered the rate both carry."""
    return isinstance(record.extra, dict) and isinstance(record.extra.get("shared_rate"), dict)


def set_aside(record: ProfileRecord) -> bool:
    """A load that measures batching against itself, not the served model: only this section reads it."""
    return is_nobatch(record) or is_shared_rate(record)


def batching_section(entries: list[Entry]) -> dict[str, BatchingCompare]:
    """Per device with a Server figure on either side: batching as exported beside batching off."""
    out: dict[str, BatchingCompare] = {}
    for d in DEVICES:
        on = _newest_server([e for e in entries if e.record.device == d and not is_nobatch(e.record)])
        off = _newest_server([e for e in entries if e.record.device == d and is_nobatch(e.record)])
        if off is None:  # without the batching-off side there is nothing to set beside the Server table
            continue
        delta = None
        if on and off and on.p99_ms is not None and off.p99_ms is not None:
            delta = round(on.p99_ms - off.p99_ms, 4)
        out[d] = BatchingCompare(device=d, on=on, off=off,
                                 capacity_ratio=_div(on and on.capacity_req_s, off.capacity_req_s),
                                 p99_delta_ms=delta, shared_rate=_shared_rate([e for e in entries
                                                                               if e.record.device == d]))
    return out


def _shared_rate(entries: list[Entry]) -> SharedRate | None:
    """The newest shared-rate load of each variant, when both were offered the same rate."""
    sides = []
    for off in (False, True):
        mine = [e for e in entries if is_shared_rate(e.record) and is_nobatch(e.record) == off]
        sides.append(max(mine, key=lambda e: e.record.created) if mine else None)
    on, off = sides
    if on is None or off is None:
        return None
    rate, other = on.record.extra["shared_rate"].get("rate_req_s"), off.record.extra["shared_rate"].get("rate_req_s")
    if not rate or rate != other:
        return None
    lon, loff = on.record.speed.latency, off.record.speed.latency
    return SharedRate(rate_req_s=rate, basis=str(on.record.extra["shared_rate"].get("basis") or ""),
                      on_source=on.source, off_source=off.source, on_p50_ms=lon.p50_ms, on_p99_ms=lon.p99_ms,
                      off_p50_ms=loff.p50_ms, off_p99_ms=loff.p99_ms,
                      duration_s=LoadParts.of(on.record).settings.duration_s)


def _newest_server(entries: list[Entry]) -> BatchingSide | None:
    servers = [e for e in entries if scenario_of(e) == "Server"]
    if not servers:
        return None
    e = max(servers, key=lambda e: e.record.created)
    r = e.record
    search = LoadParts.of(r).search
    a = r.served.attribution if r.served is not None else None
    return BatchingSide(source=e.source, model=r.model,
                        capacity_req_s=None if search is None else search.capacity_req_s,
                        p99_ms=r.speed.latency.p99_ms, mean_batch=a.mean_batch if a is not None else None,
                        lower_bound=search is not None and bool(search.lower_bound))


def placement_of(record: ProfileRecord) -> str | None:
    """"host" or "device" (a sweep point says "device (one batch resident, ...)"), None when not recorded."""
    named = str((record.settings or {}).get("data_placement") or "").split(" ", 1)[0]
    return named if named in PLACEMENTS else None


def data_path_section(entries: list[Entry]) -> dict[str, DataPath]:
    """Per device, the training runs' input paths, and the sweep's host-vs-device comparison at its best point
    (its points' own data is resident, so only that comparison is read from them)."""
    out: dict[str, DataPath] = {}
    for d in DEVICES:
        points: list[DataPathPoint] = []
        skipped = None
        for e in sorted(entries, key=lambda e: e.source):
            r = e.record
            if r.phase != "train" or r.device != d:
                continue
            if r.extra.get("sweep"):
                compared = r.extra.get("data_path")
                if isinstance(compared, dict):
                    points += _compared_points(e, compared)
                    skipped = compared.get("skipped") or skipped
                continue
            if placement_of(r) is not None:
                share = r.extra.get("data_wait_share")
                points.append(DataPathPoint(source=e.source, device=d, placement=placement_of(r) or "",
                                            batch_size=r.batch_size, precision=r.precision,
                                            throughput_samples_s=r.speed.throughput_samples_s,
                                            data_wait_share=share if isinstance(share, (int, float)) else None))
        if points or skipped:
            out[d] = DataPath(points=points, host_over_device=_host_over_device(points), skipped=skipped)
    return out


def _compared_points(e: Entry, dp: dict) -> list[DataPathPoint]:
    """The two sides train/datapath.py measured (DataPathResult.to_dict()), as points."""
    return [DataPathPoint(source=e.source, device=e.record.device, placement=str(run.get("placement")),
                          batch_size=int(dp.get("batch_size") or 0), precision=str(dp.get("precision")),
                          throughput_samples_s=run.get("samples_s"), data_wait_share=run.get("data_wait_share"),
                          host_data_ms=run.get("data_wait_ms"), compared=True, workers=run.get("workers"))
            for run in dp.get("runs") or [] if isinstance(run, dict) and run.get("placement") in PLACEMENTS]


def _host_over_device(points: list[DataPathPoint]) -> float | None:
    """Host placement's samples/s over device placement's, at the same batch and precision (None: no pair);
    the sweep's own comparison first, as both its sides ran on one split, back to back."""
    for pool in ([p for p in points if p.compared], points):
        for h in (p for p in pool if p.placement == "host"):
            for dv in (p for p in pool if p.placement == "device"):
                if (h.batch_size, h.precision) == (dv.batch_size, dv.precision):
                    return _div(h.throughput_samples_s, dv.throughput_samples_s)
    return None
