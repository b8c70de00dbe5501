"""The server process's own CPU, memory and (on a CPU server) energy while a load runs (`trainserve load
--server-pid`): what the server's metrics page cannot say (its CPU memory figure is the whole machine's, and it
has no per-process CPU nor CPU energy). The load stage samples it itself, so its record is written once, with
everything the bound needs."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from trainserve.core.errors import UserError
from trainserve.core.served import ServerProcess
from trainserve.core.telemetry import Sampler


@dataclass
class Watched:
    """A server process's sample over one load: the record's part, and the timelines each step's CPU is read from."""

    process: ServerProcess
    timeline: list[dict[str, Any]]  # the pid and its children: {"t_s", "cpu_process_percent", ...}
    own_timeline: list[dict[str, Any]]  # the pid alone
    started_wall: float  # time.time() at the timelines' t_s = 0 (steps and probes carry wall times)


class ServerProcessWatch:
    """Samples a server process (and apart, its pid alone: with several front ends, the model process that starts
    them) from `start` to `stop`."""

    def __init__(self, pid: int) -> None:
        try:
            import psutil

            psutil.Process(pid)
        except Exception:  # noqa: BLE001 -- psutil's NoSuchProcess, AccessDenied: one sentence either way
            raise UserError(f"--server-pid {pid}: no such process to sample; pass the server's pid, "
                            "or leave the option out") from None
        self.pid = pid
        self.sampler = Sampler(interval_s=0.2, pid=pid)
        self.own = Sampler(interval_s=0.2, pid=pid, include_children=False)
        self.started_wall = 0.0

    def start(self) -> ServerProcessWatch:
        self.started_wall = time.time()
        self.sampler.start()
        self.own.start()
        return self

    def stop(self) -> Watched:
        self.sampler.stop()
        self.own.stop()
        s, own = self.sampler.summary(), self.own.summary()
        process = ServerProcess(
            pid=self.pid, window_s=s["window_s"], ticks=s["ticks"],
            cpu_process_mean_percent=s["cpu_process_mean_percent"],
            cpu_process_max_percent=s["cpu_process_max_percent"],
            own_cpu_process_mean_percent=own["cpu_process_mean_percent"],
            cpu_system_mean_percent=s["cpu_system_mean_percent"], rss_max_bytes=s["rss_max_bytes"],
            cpu_energy_j=s["cpu_energy_j"])
        return Watched(process, s["timeline"], own["timeline"], self.started_wall)
