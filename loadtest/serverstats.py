"""The server's statistics extension (GET /v2/models/<m>/stats, gRPC ModelStatistics) read before and after a window.

Triton and the embedded server count, per model version, cumulative (count, ns) pairs: success (the
whole request inside the server), queue, compute_input, compute_infer and compute_output per
request, and per batch size the compute durations once per execution. The difference of two
snapshots is what the server did in between: its own per-request figures, at nanosecond resolution,
which the Prometheus page only gives in microseconds.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)
PARTS = ("success", "queue", "compute_input", "compute_infer", "compute_output")


@dataclass(frozen=True)
class Snapshot:
    """Cumulative counters of one model (all versions summed)."""

    counts: dict[str, int]  # part -> requests counted
    ns: dict[str, int]  # part -> summed ns
    executions: int  # model executions (session runs)
    inferences: int  # rows inferred
    exec_ns: int  # summed compute ns, once per execution (batch_stats): the time the model ran


def parse_stats(stats: dict[str, Any], model: str) -> Snapshot:
    """A Snapshot from the JSON form of the statistics answer ({"model_stats": [...]})."""
    counts = dict.fromkeys(PARTS, 0)
    ns = dict.fromkeys(PARTS, 0)
    executions = inferences = exec_ns = 0
    for m in stats.get("model_stats") or []:
        if m.get("name") != model:
            continue
        inf = m.get("inference_stats") or {}
        for part in PARTS:
            counts[part] += int((inf.get(part) or {}).get("count", 0))
            ns[part] += int((inf.get(part) or {}).get("ns", 0))
        executions += int(m.get("execution_count", 0))
        inferences += int(m.get("inference_count", 0))
        for b in m.get("batch_stats") or []:
            exec_ns += sum(int((b.get(k) or {}).get("ns", 0)) for k in ("compute_input", "compute_infer",
                                                                      "compute_output"))
    return Snapshot(counts, ns, executions, inferences, exec_ns)


class StatsReader:
    """Reads one model's statistics over the protocol the load uses (HTTP or gRPC), with tritonclient."""

    def __init__(self, url: str, model: str, protocol: str, timeout_s: float = 5.0) -> None:
        self.url, self.model, self.protocol, self.timeout_s = url, model, protocol, timeout_s

    def snapshot(self) -> Snapshot | None:
        """The model's counters now, or None (with a debug line) when the server does not answer them."""
        try:
            if self.protocol == "grpc":
                import tritonclient.grpc as tg

                client = tg.InferenceServerClient(self.url)
                try:
                    data = client.get_inference_statistics(self.model, as_json=True,
                                                           client_timeout=self.timeout_s)
                finally:
                    client.close()
                # the JSON form of the protobuf spells int64 as strings and leaves zero fields out
                data = {"model_stats": [_ints(m) for m in data.get("model_stats", [])]}
            else:
                import tritonclient.http as th

                client = th.InferenceServerClient(self.url, connection_timeout=self.timeout_s,
                                                  network_timeout=self.timeout_s)
                try:
                    data = client.get_inference_statistics(self.model)
                finally:
                    client.close()
        except Exception as e:  # noqa: BLE001 -- a server without the extension: no attribution, not a failure
            log.debug("no statistics from %s for %s: %s", self.url, self.model, e)
            return None
        return parse_stats(data, self.model)


def _ints(m: dict[str, Any]) -> dict[str, Any]:
    """gRPC's JSON (proto3 mapping: 64-bit ints as strings, camelCase field names) in the HTTP form."""
    inf = m.get("inference_stats") or m.get("inferenceStats") or {}
    pair = lambda d: {"count": int((d or {}).get("count", 0)), "ns": int((d or {}).get("ns", 0))}  # noqa: E731
    out_inf = {p: pair(inf.get(p) or inf.get(_camel(p))) for p in PARTS}
    batches = [{k: pair(b.get(k) or b.get(_camel(k))) for k in ("compute_input", "compute_infer", "compute_output")}
               for b in (m.get("batch_stats") or m.get("batchStats") or [])]
    return {"name": m.get("name"),
            "execution_count": int(m.get("execution_count", m.get("executionCount", 0))),
            "inference_count": int(m.get("inference_count", m.get("inferenceCount", 0))),
            "inference_stats": out_inf, "batch_stats": batches}


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(w.title() for w in rest)


def window(before: Snapshot | None, after: Snapshot | None, seconds: float | None) -> dict[str, Any] | None:
    """What the server did between two snapshots: per-request means (ms), mean batch, time its model ran."""
    if before is None or after is None:
        return None
    n = after.counts["success"] - before.counts["success"]
    out: dict[str, Any] = {"requests": n, "executions": after.executions - before.executions,
                           "inferences": after.inferences - before.inferences}
    for part in PARTS:
        count = after.counts[part] - before.counts[part]
        spent = after.ns[part] - before.ns[part]
        out[f"{part}_ms"] = round(spent / count / 1e6, 4) if count > 0 else None
    out["mean_batch"] = round(out["inferences"] / out["executions"], 3) if out["executions"] > 0 else None
    out["busy_s"] = round((after.exec_ns - before.exec_ns) / 1e9, 4)
    out["window_s"] = round(seconds, 3) if seconds else None
    return out


def busy_fraction(server: dict[str, Any] | None, instances: int) -> float | None:
    """Share of the window the model's instances were executing (1.0: every instance always running)."""
    if not server or not server.get("window_s"):
        return None
    return round(server["busy_s"] / (server["window_s"] * max(instances, 1)), 4)
