"""Each served load record as a perf_analyzer `-f` CSV, so the tools that read perf_analyzer's output
(spreadsheets, Model Analyzer-style plots) read trainserve's measurements unchanged.

perf_analyzer writes one row per concurrency level (or per request rate, with "Request Rate" as the first
column) with these columns, every time in microseconds. A ramp record gives one row per step, a plain
load record one row. Figures trainserve does not measure are left empty, never invented:
- Client Send / Client Recv: the client's serialisation time is inside its latency, not split out;
- Network+Server Send/Recv: perf_analyzer derives it from the server's request duration minus the queue
  and compute times; written only where the server's metrics give all three for the whole record;
- the server's queue and compute times come from its Triton metrics over the whole record, so a ramp's
  steps (which share one scrape window) leave them empty;
- p95: from the record's latency histogram (the whole record only); a step's p95 is not recorded.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any

from trainserve.core.profile import ProfileRecord
from trainserve.core.servedparts import LoadParts
from trainserve.loadtest.histogram import Histogram
from trainserve.report.common.collect import Collection

# perf_analyzer's -f header, in its order (its docs, "Visualizing Latency vs. Throughput")
COLUMNS = ("Concurrency", "Inferences/Second", "Client Send", "Network+Server Send/Recv", "Server Queue",
           "Server Compute Input", "Server Compute Infer", "Server Compute Output", "Client Recv",
           "p50 latency", "p90 latency", "p95 latency", "p99 latency")
RATE_COLUMN = "Request Rate"  # the first column in perf_analyzer's request-rate mode


def _us(ms: float | None) -> int | str:
    return "" if ms is None else round(ms * 1000)


def _server_us(metrics: dict[str, Any]) -> dict[str, int | str]:
    """Mean per-request server times, µs, from the scraped Triton counters (deltas over the record)."""
    n = metrics.get("nv_inference_request_success")
    out: dict[str, int | str] = {}
    for col, counter in (("Server Queue", "nv_inference_queue_duration_us"),
                         ("Server Compute Input", "nv_inference_compute_input_duration_us"),
                         ("Server Compute Infer", "nv_inference_compute_infer_duration_us"),
                         ("Server Compute Output", "nv_inference_compute_output_duration_us")):
        total = metrics.get(counter)
        out[col] = round(total / n) if n and total is not None else ""
    request = metrics.get("nv_inference_request_duration_us")
    parts = [out[c] for c in ("Server Queue", "Server Compute Input", "Server Compute Infer",
                              "Server Compute Output")]
    if n and request is not None and all(p != "" for p in parts):
        out["Network+Server Send/Recv"] = max(0, round(request / n) - sum(parts))  # type: ignore[arg-type]
    return out


def _p95_ms(record: ProfileRecord) -> float | None:
    hist = record.extra.get("latency_histogram") if isinstance(record.extra, dict) else None
    if not isinstance(hist, dict) or not hist.get("count"):
        return None
    try:
        return Histogram.from_dict(hist).percentile(95)
    except (KeyError, TypeError, ValueError):
        return None


def rows(record: ProfileRecord) -> tuple[str, list[dict[str, Any]]]:
    """(first column's name, rows) of one load record: a ramp's steps, or the record itself."""
    parts = LoadParts.of(record)
    steps = parts.ramp
    by_rate = bool(steps and all(p.rate is not None for p in steps)) or (not steps and parts.settings.rate is not None)
    first = RATE_COLUMN if by_rate else "Concurrency"
    if steps:
        return first, [{first: p.rate if by_rate else p.users, "Inferences/Second": p.throughput_samples_s,
                        "p50 latency": _us(p.p50_ms), "p90 latency": _us(p.p90_ms),
                        "p95 latency": _us(p.p95_ms), "p99 latency": _us(p.p99_ms)}
                       for p in steps if p.throughput_samples_s is not None]
    lat = record.speed.latency
    metrics = parts.server.metrics or {}
    p95 = getattr(lat, "p95_ms", None)
    row = {first: parts.settings.rate if by_rate else (record.concurrency or 1),
           "Inferences/Second": record.speed.throughput_samples_s,
           "p50 latency": _us(lat.p50_ms), "p90 latency": _us(lat.p90_ms),
           "p95 latency": _us(p95 if p95 is not None else _p95_ms(record)), "p99 latency": _us(lat.p99_ms),
           **_server_us(metrics)}
    return first, [row] if record.speed.throughput_samples_s is not None else []


def to_csv(record: ProfileRecord) -> str:
    """One record as perf_analyzer's CSV text (header and rows; empty cells where not measured)."""
    first, data = rows(record)
    header = (first,) + COLUMNS[1:]
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=header, restval="", lineterminator="\n")
    w.writeheader()
    w.writerows(data)
    return buf.getvalue()


def write_all(collection: Collection, folder: Path) -> list[Path]:
    """perf_analyzer/<record>.csv for every served load record (load/*.json) of the run."""
    written = []
    for e in collection.entries:
        r = e.record
        if r.phase != "infer" or not e.source.startswith("load/"):
            continue
        name = e.source.removeprefix("load/").removesuffix(".json").replace("/", "_") + ".csv"
        path = folder / "perf_analyzer" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(to_csv(r))
        written.append(path)
    return written
