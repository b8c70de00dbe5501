"""The load generator's own CPU: how many Locust processes a target needs, and whether the client was the limit.

A Locust process runs its users on one gevent loop, so it can use at most one core; the client as a
whole has at most min(processes that run users, usable cores). A process at >= 90% of its core, or
the whole client at >= 90% of its cores, may have held the load back: the figure is the client's
limit, and the record says so (trainserve.core.served.ClientCpu.saturated, bound "client").
"""

from __future__ import annotations

import math
import time
from typing import Any

from trainserve.core.procs import usable_cpus
from trainserve.core.served import BUSY_FRACTION, ClientCpu

# One Locust process sends about a thousand batch-1 requests/s at most (docs/BENCHMARKS.md, "Load
# generator"); planning for 800 leaves it headroom, and 16 closed-loop users keep one process busy
# against a server that answers in about a millisecond.
REQUESTS_S_PER_PROCESS = 800.0
USERS_PER_PROCESS = 16


def process_cap(device: str, cpus: int | None = None) -> int:
    """The most Locust processes beside a server on this machine.

    Beside a GPU server half the usable cores, at most 16 (its front ends and the model's process need
    the other half; the GPU's batch-1 capacity is tens of thousands of requests/s, a process's about a
    thousand); beside a CPU server an eighth, since every client core is one its onnxruntime threads lose.
    """
    cpus = cpus or usable_cpus()
    return max(1, min(16, cpus // 2)) if device == "cuda" else max(1, cpus // 8)


def auto_processes(*, mode: str, users: int | None, rate: float | None, ramp_max_users: int, device: str,
                   cpus: int | None = None) -> int:
    """Locust processes for a target: enough for its users or rate, within `process_cap`."""
    cap = process_cap(device, cpus)
    if mode in ("open", "search"):  # search: `rate` is the highest it may try (search.highest_rate)
        need = math.ceil((rate or 0.0) / REQUESTS_S_PER_PROCESS)
    elif mode == "ramp":
        need = math.ceil(ramp_max_users / USERS_PER_PROCESS)
    else:
        need = math.ceil((users or 1) / USERS_PER_PROCESS)
    return max(1, min(cap, need))


def client_cpu(per_process_cpu_s: dict[str, float], window_s: float | None, user_processes: int,
               cpus: int | None = None) -> ClientCpu:
    """ClientCpu from each process's CPU seconds over a window of `window_s` s.

    `user_processes` is how many processes ran users (the workers, or the only process); a master that
    only coordinates still counts in the total, as it shares the same cores.
    """
    cpus = cpus or usable_cpus()
    out = ClientCpu()
    if not window_s or window_s <= 0 or not per_process_cpu_s:
        return out
    out.per_process_core_fraction = {k: round(v / window_s, 3) for k, v in per_process_cpu_s.items()}
    out.total_cpu_s = round(sum(per_process_cpu_s.values()), 3)
    out.cores = max(1, min(user_processes, cpus))
    out.total_core_fraction = round(out.total_cpu_s / (window_s * out.cores), 3)
    name, top = max(out.per_process_core_fraction.items(), key=lambda kv: kv[1])
    if top >= BUSY_FRACTION:
        out.saturated = True
        out.note = f"process {name} used {top:.0%} of a core"
    elif out.total_core_fraction >= BUSY_FRACTION:
        out.saturated = True
        out.note = f"{out.total_cpu_s:.1f} CPU s in {window_s:.1f} s is {out.total_core_fraction:.0%} of its " \
                   f"{out.cores} core{'s' if out.cores != 1 else ''}"
    return out


def from_results(gen: dict[str, Any], window_s: float | None, workers: int, cpus: int | None = None) -> ClientCpu:
    """ClientCpu of a whole test from the locustfile's results["load_generator"] (`cpus`: the client host's
    usable cores, this process's by default)."""
    per = gen.get("per_process_cpu_s") or {}
    # CPU seconds over the span they were spent in (the whole test: warm-up, and every rate a search tried),
    # not over the measured window alone, which would put a 40 s search's CPU into its last few seconds
    span = gen.get("window_s") or window_s
    # with workers the master runs no users; alone, the one process does. The workers are those that reported
    # CPU: by the time the results are written they may have quit, and the runner then counts none of them
    # (a Server search's 8 workers at 19% of a core each had been judged as one core at 151%)
    workers = max(workers, sum(1 for k in per if k not in ("master", "local")))
    return client_cpu({k: float(v) for k, v in per.items()}, span, workers if workers > 0 else 1, cpus)


class StepCpu:
    """CPU seconds of the client between two points of a ramp (on the master: its own and the workers' reports).

    Workers report their CPU every few seconds (Locust's report interval), so a step's figure lags
    by up to one interval per worker; steps of 15 s or more keep that small.
    """

    def __init__(self, collector: Any) -> None:
        self.collector = collector
        self.mark = self._now()
        self.t0 = time.perf_counter()

    def _now(self) -> dict[str, float]:
        # by class name: importing locust.runners here would monkey-patch `trainserve load`'s own process
        role = "master" if type(self.collector.env.runner).__name__ == "MasterRunner" else "local"
        return {role: time.process_time(),
                **{k: float(v) for k, v in self.collector.worker_cpu.items()}}

    def finish(self) -> ClientCpu:
        now, window = self._now(), time.perf_counter() - self.t0
        per = {k: v - self.mark.get(k, 0.0) for k, v in now.items()}
        workers = len(self.collector.worker_cpu)
        return client_cpu(per, window, workers if workers > 0 else 1)
