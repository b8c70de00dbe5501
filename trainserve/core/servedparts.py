"""A load record's served parts, typed: its settings, the server it measured, the Server search, the ramp and its
saturation point (record.served, core/served.py, holds the client CPU, the attribution, the bound and the server
process's sample).

Each part is written once, by the load stage (loadtest/runner.py), and kept where the report has always read
it: `record.settings` (LoadSettings) and `record.extra` under "server", "search", "ramp" and "saturation",
encoded by trainserve/core/typedjson.py. `LoadParts.of(record)` reads them back, the one reader of those keys
outside the report.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

from trainserve.core.errors import UserError
from trainserve.core.served import SERVED_SCHEMA_VERSION, Attribution, Bound, ClientCpu, Served
from trainserve.core.typedjson import OPTIONAL, from_json, to_json

# record.extra's keys of the parts: the JSON shape the report's readers know
SERVER, SEARCH, RAMP, SATURATION = "server", "search", "ramp", "saturation"


class RampStop(enum.StrEnum):
    """Why a closed-loop ramp stopped stepping up users (loadtest/shapes.py)."""

    SLO = "slo"  # a step's p99 went over --ramp-stop-p99-ms
    PLATEAU = "plateau"  # a step added less throughput than --min-gain
    LIMIT = "limit"  # the ramp reached its user or time limit without saturating


@dataclass
class LoadSettings:
    """How the load was run (record.settings of a load record)."""

    protocol: str
    mode: str  # "closed", "open", "ramp" or "search"
    users: int | None
    rate: float | None  # open loop, or a search's first rate: requests/s
    duration_s: float
    processes: int  # Locust processes (master and workers)
    input_data: str
    validate: str
    http_client: str
    url: str
    metrics_url: str | None
    locust_exit_code: int
    scenario: str  # MLPerf's name (Server, SingleStream, Offline), or "ramp" / "open loop"
    warmup_s: float
    window_s: float
    slo_p99_ms: float  # the p99 the figure was held to: a ramp's stop, else the search's SLO
    repeats: int
    server_pid: int | None = field(default=None, metadata=OPTIONAL)  # the server process sampled, if one was


@dataclass
class ServerInfo:
    """The server measured, from its metadata, and its Prometheus metrics over the figure's window."""

    name: str
    version: str
    metrics: dict[str, Any]  # MetricsScraper.summary(): per metric name, its window's figures
    instance_group: Any  # the model's config, as the server reports it
    max_batch_size: int
    frontends: int | None  # the embedded server's front-end processes (null: the server does not say)


@dataclass
class RampStep:
    """One step of the closed-loop ramp: as the locustfile measured it, then what the load stage added."""

    users: int
    rate: float | None
    requests_s: float
    throughput_samples_s: float
    p50_ms: float | None
    p90_ms: float | None
    p95_ms: float | None
    p99_ms: float | None
    p999_ms: float | None
    failures: int
    window_s: float
    mean_ms: float | None
    client_cpu: ClientCpu
    server: dict[str, Any] | None  # the server's statistics over the step (loadtest/serverstats.window)
    wall_start: float
    wall_end: float
    attribution: Attribution | None = field(default=None, metadata=OPTIONAL)
    device_busy_fraction: float | None = field(default=None, metadata=OPTIONAL)
    server_cpu_cores: float | None = field(default=None, metadata=OPTIONAL)  # with --server-pid only
    frontend_cpu_cores: float | None = field(default=None, metadata=OPTIONAL)
    system_cpu_percent: float | None = field(default=None, metadata=OPTIONAL)
    bound: Bound | None = field(default=None, metadata=OPTIONAL)


@dataclass
class Saturation:
    """The ramp's capacity point: its best step within the stop, and why it stopped."""

    users: int | None  # null: no step met the stop
    requests_s: float | None
    reason: str  # in words, for people; `stop` is what code reads
    stop: RampStop


@dataclass
class SearchProbe:
    """One rate a Server search tried (loadtest/search.py Probe.row), with the server's CPU over its windows."""

    rate: float
    passed: bool
    reasons: list[str]
    requests_s: float | None
    window_s: float
    mean_ms: float | None
    min_ms: float | None
    max_ms: float | None
    p50_ms: float | None
    p90_ms: float | None
    p95_ms: float | None
    p99_ms: float | None
    p999_ms: float | None
    requests: int
    failures: int
    late: int
    client_core_fraction: float | None
    per_process_core_fraction: dict[str, float] | None
    stability: dict[str, Any] | None
    server: dict[str, Any] | None
    wall_start: float | None = field(default=None, metadata=OPTIONAL)
    wall_end: float | None = field(default=None, metadata=OPTIONAL)
    server_cpu_cores: float | None = field(default=None, metadata=OPTIONAL)  # with --server-pid only
    frontend_cpu_cores: float | None = field(default=None, metadata=OPTIONAL)
    system_cpu_percent: float | None = field(default=None, metadata=OPTIONAL)


@dataclass
class ServerSearch:
    """The Server scenario: the highest Poisson rate that met the SLO, and how it was found."""

    capacity_req_s: float | None
    upper_req_s: float | None  # the lowest rate that failed
    lower_bound: bool  # the server's capacity is at least capacity_req_s
    budget_ended: bool  # the time ran out before the bracket closed
    bracket: float | None
    client_limited: bool  # the lowest failing rate failed because the client was busy
    stop_reason: str | None
    slo_p99_ms: float
    max_error_fraction: float
    probes: list[SearchProbe]
    estimate: dict[str, Any] | None  # the closed-loop probe that set the first rate (null: --rate set it)
    first_rate_req_s: float
    step: float
    elapsed_s: float
    stability: dict[str, Any] | None
    figure: SearchProbe | None = field(default=None, metadata=OPTIONAL)  # the capacity's probe
    percentiles_short: list[str] | None = field(default=None, metadata=OPTIONAL)

    def probes_at(self, *rates: float) -> list[SearchProbe]:
        """The probes of these rates, in the order they ran."""
        return [p for p in self.probes if any(abs(p.rate - r) < 1e-3 for r in rates)]


@dataclass
class LoadParts:
    """Every served part of one load record but record.served: what `of` reads and `write` writes."""

    settings: LoadSettings
    server: ServerInfo
    search: ServerSearch | None = None
    ramp: list[RampStep] = field(default_factory=list)
    saturation: Saturation | None = None

    @classmethod
    def of(cls, record: Any) -> LoadParts:
        """The parts of a load record (a ProfileRecord) written by this version; raises UserError for another."""
        version = record.served.schema_version if record.served is not None else None
        if version != SERVED_SCHEMA_VERSION:
            raise UserError(f"load record {record.target!r} has served schema {version!r}, this trainserve reads "
                            f"{SERVED_SCHEMA_VERSION}; re-run `trainserve load` for it")
        x = record.extra
        return cls(settings=from_json(LoadSettings, record.settings), server=from_json(ServerInfo, x.get(SERVER)),
                   search=from_json(ServerSearch | None, x.get(SEARCH)),
                   ramp=from_json(list[RampStep], x.get(RAMP) or []),
                   saturation=from_json(Saturation | None, x.get(SATURATION)))

    def write(self, record: Any) -> None:
        """Into `record` (a ProfileRecord), where the report reads them, its served part stamped with the schema
        they are written in; parts that do not apply are left out."""
        if record.served is None:
            record.served = Served()
        record.served.schema_version = SERVED_SCHEMA_VERSION
        record.settings = to_json(self.settings)
        record.extra[SERVER] = to_json(self.server)
        for key, part in ((SEARCH, self.search), (RAMP, self.ramp or None), (SATURATION, self.saturation)):
            if part is not None:
                record.extra[key] = to_json(part)
            else:
                record.extra.pop(key, None)
