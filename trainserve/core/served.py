"""What a served figure is made of, and what bounded it: the typed part of a load record (record.served).

- `ClientCpu`: the load generator's own CPU over the window, per process and in total against the
  cores it had. A client at >= 90% of those cores may itself be the limit: such a figure is marked
  (`saturated`, and the bound "client"), never reported as the server's.
- `Attribution`: one operating point's mean client latency split into the client's own time
  (calibrated against a null endpoint, trainserve.loadtest.attribution), the server's front end,
  its queue and its compute (from the server's statistics extension), and the rest: network and
  whatever the server's own timer does not cover. "The server adds X" is `server_ms`, the server's
  own figure (queue + compute + its front end), never client latency minus an in-process latency.
- `Bound`: what limited a capacity figure: "device" (the model's executions keep it busy >= 90%, or
  GPU utilization >= 90%), "frontend" (the front-end processes' CPU near one core each; with
  several, the model process that starts them is not counted), "client", "slo" (the next load broke the latency SLO), "plateau" (throughput stopped
  growing with nothing measured saturated), "budget" (a capacity search's time ran out before it bracketed
  the capacity: the figure is a lower bound), or "load" (nothing saturated: the offered load itself).

`decide_bound` is the one rule; the load runner applies it once, when it writes the record, with
everything it needs: the client's CPU, the server's statistics and metrics, and (given `--server-pid`) the
server process's own CPU, sampled by the load stage itself. The ramp, the search and the process sample
are typed in trainserve/core/servedparts.py.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

from trainserve.core.typedjson import OPTIONAL

BUSY_FRACTION = 0.9  # a device, a front end or a client at or above this share of its capacity is saturated
IN_FLIGHT_FRACTION = 0.9  # closed-loop users keep ~all their requests in flight; fewer: the client held them back
SERVED_SCHEMA_VERSION = 1  # of record.served and the served parts (servedparts.py); 0: written before them


class BoundKind(enum.StrEnum):
    """What limited a figure (the module's docstring says when each applies)."""

    CLIENT = "client"
    DEVICE = "device"
    FRONTEND = "frontend"
    SLO = "slo"
    PLATEAU = "plateau"
    BUDGET = "budget"
    LOAD = "load"


BOUND_KINDS = tuple(k.value for k in BoundKind)


@dataclass
class ClientCpu:
    """The load generator's CPU over a window; 1.0 = one core busy for the whole window."""

    per_process_core_fraction: dict[str, float] = field(default_factory=dict)  # process -> CPU s / window s
    total_cpu_s: float | None = None
    cores: int | None = None  # what it had: processes that run users, at most the usable cores
    total_core_fraction: float | None = None  # total CPU s / (window s x cores)
    saturated: bool = False  # a process or the whole client at >= BUSY_FRACTION of its cores
    note: str = ""  # why it counts as saturated, in words


@dataclass
class Attribution:
    """Mean client latency of one operating point, split; all ms per request."""

    latency_ms: float  # the client's mean latency
    client_ms: float | None = None  # the client's own time per request (null-endpoint calibration)
    server_ms: float | None = None  # the server's own request duration (its "success" statistic)
    frontend_ms: float | None = None  # server_ms minus queue and compute: the server's own handling
    queue_ms: float | None = None
    compute_ms: float | None = None  # compute_input + compute_infer + compute_output
    network_ms: float | None = None  # the rest: latency - client - server (network, unmeasured front end)
    requests: int = 0  # requests the server counted in the window
    mean_batch: float | None = None  # rows per model execution
    consistent: bool = True  # the measured parts fit inside the latency (within tolerance)
    note: str = ""

    def line(self) -> str:
        """One line for the CLI: "mean 2.21 ms = client 0.01 + network 1.47 + ... (the server adds 0.77 ms)"."""
        f = lambda x: "?" if x is None else f"{x:.2f}"  # noqa: E731
        return (f"mean {f(self.latency_ms)} ms = client {f(self.client_ms)} + network and the rest "
                f"{f(self.network_ms)} + server front end {f(self.frontend_ms)} + queue {f(self.queue_ms)} + compute "
                f"{f(self.compute_ms)} ms (the server adds {f(self.server_ms)} ms by its own statistics)"
                + ("" if self.consistent else f"; inconsistent: {self.note}"))

    def parts(self) -> dict[str, float | None]:
        """The stacked bar's segments, bottom to top; they sum to latency_ms."""
        return {"client": self.client_ms, "network": self.network_ms, "frontend": self.frontend_ms,
                "queue": self.queue_ms, "compute": self.compute_ms}


@dataclass
class Bound:
    """What limited a figure: kind in BOUND_KINDS, and a clause that names it first ("the GPU: busy ...")."""

    kind: BoundKind
    detail: str

    def __post_init__(self) -> None:
        if self.kind not in BOUND_KINDS:
            raise ValueError(f"Bound.kind {self.kind!r} is not one of {', '.join(BOUND_KINDS)}")
        self.kind = BoundKind(self.kind)


@dataclass
class ServerProcess:
    """The server process's own CPU and memory over a load, sampled by the load stage (`--server-pid`): the
    server's metrics page has no per-process CPU, and its memory figure is the whole machine's."""

    pid: int
    window_s: float  # the sampled span, s
    ticks: int  # samples taken
    cpu_process_mean_percent: float | None = None  # the pid and its children; 100 = one core
    cpu_process_max_percent: float | None = None
    own_cpu_process_mean_percent: float | None = None  # the pid alone (with front ends: the model process)
    cpu_system_mean_percent: float | None = None  # the host's, 0..100 over all cores
    rss_max_bytes: int | None = None  # the pid and its children
    cpu_energy_j: float | None = None  # RAPL packages over the window; null where unreadable


@dataclass
class Served:
    """A load record's client CPU, latency attribution and bound (null on records from older versions)."""

    client: ClientCpu = field(default_factory=ClientCpu)
    attribution: Attribution | None = None
    bound: Bound | None = None
    device_busy_fraction: float | None = None  # model executions' time / window / instances (server stats)
    frontend_cpu_cores: float | None = None  # the front-end processes' CPU, cores; one process: the whole server's
    frontends: int = 1  # front-end processes of the server (one core each at most)
    server_cpu_cores: float | None = None  # the whole server's CPU (model process and front ends), cores
    slo_p99_ms: float | None = None  # the p99 the figure was held to: a ramp's stop, else the search's SLO
    server_process: ServerProcess | None = field(default=None, metadata=OPTIONAL)  # with --server-pid only
    schema_version: int = 0  # SERVED_SCHEMA_VERSION when written; 0: before the served parts were typed


NESTED: dict[tuple[str, str], type] = {
    ("Served", "client"): ClientCpu,
    ("Served", "attribution"): Attribution,
    ("Served", "bound"): Bound,
    ("Served", "server_process"): ServerProcess,
}


def decide_bound(*, client: ClientCpu, device_busy: float | None, gpu_util_percent: float | None,
                 frontend_cpu_cores: float | None, frontends: int, device: str, slo_broken: str | None,
                 server_cpu_cores_available: int | None = None, system_cpu_percent: float | None = None,
                 server_cpu_cores: float | None = None, budget_ended: str | None = None) -> Bound:
    """The one rule: the client first (its figure is not the server's), then the device, the front end, the SLO.

    `frontend_cpu_cores` is the front-end processes' CPU; `server_cpu_cores` the whole server's (the same with
    one process, and taken as the same where not given): a CPU server's device is every core it uses."""
    whole = server_cpu_cores if server_cpu_cores is not None else frontend_cpu_cores
    if client.saturated:
        return Bound(BoundKind.CLIENT, f"the client: the load generator was saturated ({client.note}), so this is the "
                               "client's limit, not the server's; add --processes")
    busy = [f"its model executions kept it busy {device_busy:.0%} of the time"] \
        if device_busy is not None and device_busy >= BUSY_FRACTION else []
    if device == "cuda" and gpu_util_percent is not None and gpu_util_percent >= BUSY_FRACTION * 100:
        busy.append(f"GPU utilization {gpu_util_percent:.0f}%")
    if device == "cpu" and whole is not None and server_cpu_cores_available \
            and whole >= BUSY_FRACTION * server_cpu_cores_available:
        busy.append(f"the server used {whole:.1f} of {server_cpu_cores_available} cores")
    if device == "cpu" and system_cpu_percent is not None and system_cpu_percent >= BUSY_FRACTION * 100:
        # a server on loopback shares the host's cores with its client: together they can fill them
        busy.append(f"the host's CPUs were {system_cpu_percent:.0f}% busy (the server, its client and anything else)")
    if busy:
        return Bound(BoundKind.DEVICE, f"the {'GPU' if device == 'cuda' else 'CPU'}: busy, " + "; ".join(busy))
    if device == "cuda" and frontend_cpu_cores is not None and frontend_cpu_cores >= BUSY_FRACTION * frontends:
        return Bound(BoundKind.FRONTEND, f"the server's front end: CPU-bound at {frontend_cpu_cores:.2f} cores for "
                                 f"{frontends} front-end process{'es' if frontends != 1 else ''} (one core each)")
    if slo_broken:  # the whole phrase: which limit (the SLO, or the ramp's stop) and how the next load broke it
        return Bound(BoundKind.SLO, slo_broken)
    if budget_ended:  # not the offered load: the search stopped raising it because its time was up
        return Bound(BoundKind.BUDGET, budget_ended)
    return Bound(BoundKind.LOAD, "the offered load: neither the device, the front end nor the client was saturated")


def as_dict(obj: Any) -> Any:
    """A dataclass of this module as plain JSON-ready data (a ramp step's client CPU, as the locustfile sends it)."""
    import dataclasses

    return dataclasses.asdict(obj) if dataclasses.is_dataclass(obj) else obj


def in_flight(row: Any) -> float | None:
    """Requests a closed-loop step kept in flight on average: requests/s x mean latency (Little's law).

    `row`: a RampStep (servedparts.py) or, for the report's readers, its JSON dict."""
    x, r = (row.get("requests_s"), row.get("mean_ms")) if isinstance(row, dict) else (row.requests_s, row.mean_ms)
    return x * r / 1000 if isinstance(x, (int, float)) and isinstance(r, (int, float)) else None
