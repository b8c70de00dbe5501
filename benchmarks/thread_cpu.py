"""CPU of every thread of a process and its children, per interval: which thread of a server is the busy one.

    python benchmarks/thread_cpu.py --pid PID [--interval-s 5] [--seconds 120] [--out FILE.json]

Reads /proc/<pid>/task/<tid>/stat (utime + stime) of the process and its descendants every interval and
prints, per interval, each thread's share of a core (threads under 5% are summed per process). Linux only.
Stops when the process exits or after --seconds. The JSON holds every interval's shares.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

TICK = os.sysconf("SC_CLK_TCK")


def _children(pid: int) -> list[int]:
    kids: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            kids += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            pass
    return kids


def _tree(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo += _children(p)
    return out


def _sample(root: int) -> dict[tuple[int, int], tuple[str, str, float]]:
    """(pid, tid) -> (process name, thread name, cpu seconds so far)."""
    seen: dict[tuple[int, int], tuple[str, str, float]] = {}
    for pid in _tree(root):
        try:
            pname = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")[:80]
        except OSError:
            continue
        for task in Path(f"/proc/{pid}/task").glob("*"):
            try:
                stat = (task / "stat").read_text()
            except OSError:
                continue
            comm = stat[stat.index("(") + 1:stat.rindex(")")]
            fields = stat[stat.rindex(")") + 2:].split()
            seen[(pid, int(task.name))] = (pname, comm, (int(fields[11]) + int(fields[12])) / TICK)
    return seen


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pid", type=int, required=True)
    ap.add_argument("--interval-s", type=float, default=5.0)
    ap.add_argument("--seconds", type=float, default=120.0)
    ap.add_argument("--out", type=Path)
    a = ap.parse_args()
    if not Path(f"/proc/{a.pid}").exists():
        print(f"no process {a.pid}: pass the pid of a running server", file=sys.stderr)
        return 2
    intervals = []
    prev, t_prev, t_end = _sample(a.pid), time.monotonic(), time.monotonic() + a.seconds
    while time.monotonic() < t_end and Path(f"/proc/{a.pid}").exists():
        time.sleep(a.interval_s)
        now, t_now = _sample(a.pid), time.monotonic()
        span = t_now - t_prev
        shares: dict[str, float] = {}
        for key, (pname, comm, cpu) in now.items():
            share = (cpu - prev.get(key, (pname, comm, cpu))[2]) / span
            main = " main" if key[0] == key[1] else ""
            name = f"{key[0]}/{key[1]}{main} {comm}" if share >= 0.05 else f"{key[0]} (other threads)"
            shares[name] = shares.get(name, 0.0) + share
        procs = {str(pid): pname for (pid, _), (pname, _, _) in now.items()}
        intervals.append({"t_s": round(t_now - (t_end - a.seconds), 1), "span_s": round(span, 2),
                          "shares": {k: round(v, 3) for k, v in sorted(shares.items(), key=lambda kv: -kv[1])},
                          "processes": procs})
        top = ", ".join(f"{k} {v:.2f}" for k, v in sorted(shares.items(), key=lambda kv: -kv[1])[:10] if v >= 0.02)
        print(f"t={intervals[-1]['t_s']:6.1f}s  {top}", flush=True)
        prev, t_prev = now, t_now
    if a.out:
        a.out.write_text(json.dumps(intervals, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
