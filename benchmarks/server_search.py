"""The Server scenario's search on the GPU from several Locust processes (issue 24 item 1): one table per record.

Reads the Server records a `trainserve run` left (runs/<run>/load/embedded-<device>-server.json) and writes
$OUT/server_search.json and .md: the processes that sent, the capacity, whether it is a lower bound or the
client's limit, and per rate tried its p99, its answered requests/s and each worker's share of a core.

    python benchmarks/server_search.py --run-dir /tmp/gpu-results/runs/gpu-search
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from trainserve.core.profile import ProfileRecord


def summarize(path: Path) -> dict:
    record = ProfileRecord.load(path)
    search = record.extra.get("search") or {}
    return {
        "record": path.name, "device": record.device, "processes": record.settings.get("processes"),
        "capacity_req_s": search.get("capacity_req_s"), "upper_req_s": search.get("upper_req_s"),
        "lower_bound": search.get("lower_bound"), "client_limited": search.get("client_limited"),
        "stop_reason": search.get("stop_reason"), "slo_p99_ms": search.get("slo_p99_ms"),
        "probes": [{"rate": p["rate"], "passed": p["passed"], "p99_ms": p.get("p99_ms"),
                    "requests_s": p.get("requests_s"), "requests": p.get("requests"),
                    "busiest_core_fraction": p.get("client_core_fraction"),
                    "per_process_core_fraction": p.get("per_process_core_fraction"), "reasons": p["reasons"]}
                   for p in search.get("probes", [])],
    }


def markdown(rows: list[dict]) -> str:
    out = []
    for r in rows:
        out += [f"### {r['record']} ({r['device']}, {r['processes']} Locust process(es))", "",
                f"capacity {r['capacity_req_s']} req/s (lowest failing {r['upper_req_s']}), lower bound "
                f"{r['lower_bound']}, client limited {r['client_limited']}; {r['stop_reason']}", "",
                "| rate | passed | p99 ms | answered req/s | busiest process (cores) | processes | why not |",
                "| --- | --- | --- | --- | --- | --- | --- |"]
        for p in r["probes"]:
            out.append(f"| {p['rate']:g} | {p['passed']} | {p['p99_ms']} | {p['requests_s']} | "
                       f"{p['busiest_core_fraction']} | {len(p['per_process_core_fraction'] or {})} | "
                       f"{'; '.join(p['reasons'])} |")
        out.append("")
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run-dir", type=Path, required=True)
    args = ap.parse_args()
    rows = [summarize(p) for p in sorted((args.run_dir / "load").glob("embedded-*-server.json"))]
    out = Path(os.environ.get("OUT", "bench-out"))
    out.mkdir(parents=True, exist_ok=True)
    (out / "server_search.json").write_text(json.dumps(rows, indent=1))
    (out / "server_search.md").write_text(markdown(rows))
    print(markdown(rows))


if __name__ == "__main__":
    main()
