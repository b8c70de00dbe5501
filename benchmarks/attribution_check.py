"""Attribution and bounds of served figures, end to end through `trainserve load` (issue 23, items 3 and 4).

One `trainserve serve` on a repository written by the export stage (random-weight zoo CNN, as
grpc_vs_http.py), then `trainserve load` points: batch 1 at 1 and 16 users over HTTP and gRPC, and a
batch-1 HTTP ramp, each with `--processes 0` (enough client processes for the target). Per point it
prints and writes the record's `served` part: client CPU (and whether it saturated), the latency
split (client / network / server front end / queue / compute) and the bound.

    python benchmarks/attribution_check.py --device cuda --preset small
    python benchmarks/attribution_check.py --device cpu --preset tiny --ramp-max-users 4 --seconds 3

Writes $OUT/attribution_check.json and $OUT/attribution_check.md (default OUT=./bench-out).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.grpc_vs_http import export_repository  # noqa: E402
from trainserve.core.procs import Children, trainserve_argv, wait_ready  # noqa: E402
from trainserve.core.profile import ProfileRecord  # noqa: E402

PARTS = ("client_ms", "network_ms", "frontend_ms", "queue_ms", "compute_ms")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda", choices=["cpu", "cuda"])
    ap.add_argument("--preset", default="small")
    ap.add_argument("--seconds", type=float, default=10.0, help="per plain point")
    ap.add_argument("--ramp-step-s", type=float, default=15.0)
    ap.add_argument("--ramp-max-users", type=int, default=64)
    ap.add_argument("--slo-p99-ms", type=float, default=20.0)
    a = ap.parse_args()
    out = Path(os.environ.get("OUT", "bench-out"))
    out.mkdir(parents=True, exist_ok=True)
    children = Children()
    rows = []
    with tempfile.TemporaryDirectory(prefix="attr-") as tmp:
        root = Path(tmp)
        repo, model, _ = export_repository(root / "export", a.preset, a.device)
        try:
            server = children.start("serve", trainserve_argv("serve", "--model-repository", str(repo), "--device",
                                                             a.device, "--http-port", "0", "--grpc-port", "0",
                                                             "--metrics-port", "0"),
                                    root / "serve.log", capture_stdout=True)
            addr = wait_ready(server, 300)
            metrics = ["--metrics-url", f"http://{addr['metrics']}/metrics"]
            points = [("http-u1", "http", ["--users", "1", "--duration", f"{a.seconds:g}s"]),
                      ("http-u16", "http", ["--users", "16", "--duration", f"{a.seconds:g}s"]),
                      ("grpc-u1", "grpc", ["--users", "1", "--duration", f"{a.seconds:g}s"]),
                      ("grpc-u16", "grpc", ["--users", "16", "--duration", f"{a.seconds:g}s"]),
                      ("http-ramp", "http", ["--ramp", "--ramp-step-s", f"{a.ramp_step_s:g}", "--ramp-max-users",
                                             str(a.ramp_max_users), "--ramp-stop-p99-ms", f"{a.slo_p99_ms:g}",
                                             "--duration", f"{a.ramp_step_s * (a.ramp_max_users + 1):.0f}s"])]
            for name, protocol, args in points:
                argv = trainserve_argv("load", "--url", addr[protocol], "--protocol", protocol, "--model", model,
                                       "--batch", "1", "--processes", "0", "--target", name, "--run", "attr",
                                       "--runs-dir", str(root / "runs"), *metrics, *args)
                child = children.start(name, argv, root / f"{name}.log")
                rc = children.wait(child, timeout_s=a.ramp_step_s * (a.ramp_max_users + 2) + 120)
                path = root / "runs" / "attr" / "load" / f"{name}.json"
                if not path.is_file():
                    print(f"{name}: no record (rc {rc}); log: {(root / f'{name}.log').read_text()[-800:]}")
                    continue
                rows += _rows(name, ProfileRecord.load(path))
        finally:
            children.stop_all()
    (out / "attribution_check.json").write_text(json.dumps({"device": a.device, "preset": a.preset, "points": rows},
                                                           indent=1))
    md = _markdown(a, rows)
    (out / "attribution_check.md").write_text(md)
    print(md)
    return 0


def _rows(name: str, r: ProfileRecord) -> list[dict]:
    s = r.served
    base = {"point": name, "processes": r.settings.get("processes"), "requests_s": r.speed.requests_s,
            "client_saturated": s.client.saturated if s else None,
            "client_cores": s.client.total_core_fraction if s else None,
            "bound": (s.bound.kind + ": " + s.bound.detail) if s and s.bound else None,
            "attribution": s.attribution.__dict__ if s and s.attribution else None}
    rows = [base]
    for step in r.extra.get("ramp") or []:
        rows.append({"point": f"{name} {step['users']} users", "processes": r.settings.get("processes"),
                     "requests_s": step.get("requests_s"),
                     "client_saturated": (step.get("client_cpu") or {}).get("saturated"),
                     "client_cores": (step.get("client_cpu") or {}).get("total_core_fraction"),
                     "bound": (step.get("bound") or {}).get("kind"), "attribution": step.get("attribution")})
    return rows


def _markdown(a: argparse.Namespace, rows: list[dict]) -> str:
    head = "| point | procs | req/s | client saturated | latency | " + " | ".join(PARTS) + " | server | batch | bound |"
    lines = [f"# Attribution check: {a.device}, cnn {a.preset}", "", head, "|" + "---|" * (head.count("|") - 1)]
    for row in rows:
        at = row["attribution"] or {}
        cells = [row["point"], str(row["processes"]), f"{row['requests_s'] or 0:,.0f}", str(row["client_saturated"]),
                 str(at.get("latency_ms")), *(str(at.get(p)) for p in PARTS), str(at.get("server_ms")),
                 str(at.get("mean_batch")), str(row["bound"])]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
