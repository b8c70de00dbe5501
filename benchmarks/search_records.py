"""The Server searches of some load records, side by side: `python benchmarks/search_records.py REC.json... --out DIR`.

For each record `trainserve load --search` wrote: its budget, the closed-loop estimate that set its first rate,
each rate tried and whether it met the SLO, the capacity, the bracket and the seconds it took. Writes
DIR/searches.json (machine, command, date, figures) and DIR/searches.md (the table docs/BENCHMARKS.md shows).
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
from pathlib import Path


def row(path: Path) -> dict:
    r = json.loads(path.read_text())
    s = r["extra"]["search"]
    est = s.get("estimate") or {}
    return {"record": path.name, "created": r.get("created"), "budget_s": r["settings"].get("duration_s"),
            "slo_p99_ms": s.get("slo_p99_ms"), "estimate_req_s": est.get("requests_s"),
            "estimate_users": est.get("users"), "first_rate_req_s": s.get("first_rate_req_s"),
            "rates_tried": [round(p["rate"]) for p in s.get("probes", [])],
            "capacity_req_s": s.get("capacity_req_s"), "upper_req_s": s.get("upper_req_s"),
            "lower_bound": s.get("lower_bound"), "stop_reason": s.get("stop_reason"), "elapsed_s": s.get("elapsed_s"),
            "device_name": r.get("device_name"), "cpu_model": (r.get("host") or {}).get("cpu_model"),
            "logical_cpus": (r.get("host") or {}).get("logical_cpus")}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("records", nargs="+", type=Path)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--label", action="append", default=[], help="a name per record, in order")
    a = ap.parse_args()
    rows = [row(p) for p in a.records]
    for label, r in zip(a.label, rows):
        r["label"] = label
    first = rows[0]
    out = {"machine": f"{first['device_name']}, {first['cpu_model']} ({first['logical_cpus']} CPUs)",
           "command": "python benchmarks/search_records.py " + " ".join(sys.argv[1:]),
           "date": datetime.date.today().isoformat(), "searches": rows}
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "searches.json").write_text(json.dumps(out, indent=1) + "\n")
    md = ["| search | budget | closed-loop estimate | rates tried (req/s) | capacity | next failing | stop | seconds |",
          "|---|---:|---:|---|---:|---:|---|---:|"]
    for r in rows:
        md.append(f"| {r.get('label', r['record'])} | {r['budget_s']:g} s | {r['estimate_req_s']:,.0f} req/s at "
                  f"{r['estimate_users']} users | {', '.join(f'{x:,}' for x in r['rates_tried'])} | "
                  f"{r['capacity_req_s']:,.0f} | {r['upper_req_s']:,.0f} | {r['stop_reason']} | {r['elapsed_s']:.0f} |")
    (a.out / "searches.md").write_text("\n".join(md) + "\n")
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
