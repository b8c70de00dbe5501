"""A load record's served parts, typed: its settings, the server it measured, the Server search, the ramp and its
saturation point (record.served, core/served.py, holds the client CPU, the attribution, the bound and the server
process's sample).

Each part is written once, by the load stage (loadtest/runner.py), and kept where the report has always read
it: `record.settings` (LoadSettings) and `record.extra` under "server", "search", "ramp", "saturation",
"percentiles_short" and "repeats", encoded by trainserve/core/typedjson.py. `LoadParts.of(record)` reads them
back, the one reader of those keys.

A record written before the parts were typed (served schema 0, or no served part at all) has the same keys in
looser dicts: `of` reads what it finds and leaves the rest None, as the report's readers always took a missing
key, so older runs still report.
"""

from __future__ import annotations

import dataclasses
import enum
import types
import typing
from dataclasses import dataclass, field
from typing import Any

from trainserve.core.errors import UserError
from trainserve.core.served import SERVED_SCHEMA_VERSION, Attribution, Bound, ClientCpu, Served
from trainserve.core.typedjson import OPTIONAL, from_json, to_json

# record.extra's keys of the parts: the JSON shape the report's readers know
SERVER, SEARCH, RAMP, SATURATION = "server", "search", "ramp", "saturation"
PERCENTILES_SHORT, REPEATS = "percentiles_short", "repeats"
LEGACY_SCHEMAS = (None, 0)  # a record with no served part, or one written before the parts were typed


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
class HeldOut:
    """A figure the report's bound checks withheld from a ramp step (trainserve/core/bounds.py screen)."""

    short: str  # what a table cell shows in its place
    error: str  # the bound it broke, in a sentence


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
    # per withheld field (its value set to None): added by the report's screen, never by the load stage
    out_of_bounds: dict[str, HeldOut] | None = field(default=None, metadata=OPTIONAL)


@dataclass
class Saturation:
    """The ramp's capacity point: its best step within the stop, and why it stopped."""

    users: int | None  # null: no step met the stop
    requests_s: float | None
    reason: str  # in words, for people; `stop` is what code reads
    stop: RampStop  # None in a record written before the parts were typed


@dataclass
class Repeat:
    """One repeat's own figures, with --repeats (loadtest/runner.py repeat_row); the record's are pooled."""

    requests_s: float | None
    capacity_req_s: float | None  # a search's capacity (null: a plain load, or no rate met the SLO)
    p50_ms: float | None
    p95_ms: float | None
    p99_ms: float | None
    p999_ms: float | None
    stable: bool | None


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
    percentiles_short: list[str] = field(default_factory=list)  # the figure's percentiles with too few requests
    repeats: list[Repeat] = field(default_factory=list)  # with --repeats > 1: each repeat's own figures

    @classmethod
    def of(cls, record: Any) -> LoadParts:
        """The parts of a load record (a ProfileRecord) written by this version or before the parts were typed;
        raises UserError for a record of a newer schema."""
        version = record.served.schema_version if record.served is not None else None
        if version in LEGACY_SCHEMAS:
            x = _keys(record)
            return _legacy(cls, {**x, "settings": record.settings or {}, SERVER: x[SERVER] or {}})
        if version != SERVED_SCHEMA_VERSION:
            raise UserError(f"load record {record.target!r} has served schema {version!r}, this trainserve reads "
                            f"{SERVED_SCHEMA_VERSION}; re-run `trainserve load` for it with this trainserve")
        x = _keys(record)
        return cls(settings=from_json(LoadSettings, record.settings), server=from_json(ServerInfo, x[SERVER]),
                   search=from_json(ServerSearch | None, x[SEARCH]), ramp=from_json(list[RampStep], x[RAMP] or []),
                   saturation=from_json(Saturation | None, x[SATURATION]),
                   percentiles_short=list(x[PERCENTILES_SHORT] or []),
                   repeats=from_json(list[Repeat], x[REPEATS] or []))

    def write(self, record: Any) -> None:
        """Into `record` (a ProfileRecord), where the report reads them, its served part stamped with the schema
        they are written in; parts that do not apply are left out."""
        if record.served is None:
            record.served = Served()
        record.served.schema_version = SERVED_SCHEMA_VERSION
        record.settings = to_json(self.settings)
        record.extra[SERVER] = to_json(self.server)
        record.extra[PERCENTILES_SHORT] = list(self.percentiles_short)
        for key, part in ((SEARCH, self.search), (RAMP, self.ramp or None), (SATURATION, self.saturation),
                          (REPEATS, self.repeats or None)):
            if part is not None:
                record.extra[key] = to_json(part)
            else:
                record.extra.pop(key, None)


def _keys(record: Any) -> dict[str, Any]:
    """The parts' keys of record.extra (None where absent)."""
    x = record.extra if isinstance(record.extra, dict) else {}
    return {k: x.get(k) for k in (SERVER, SEARCH, RAMP, SATURATION, PERCENTILES_SHORT, REPEATS)}


def _legacy(kind: Any, data: Any) -> Any:
    """`data` from a record written before the parts were typed, as `kind`: a section's missing keys take their
    default or None and keys it does not know are dropped; a value of another shape is None."""
    if data is None:
        return None
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin in (typing.Union, types.UnionType):
        sections = [a for a in args if a is not type(None)]
        return _legacy(sections[0], data) if len(sections) == 1 else data
    if origin is list:
        items = [_legacy(args[0], v) for v in data] if isinstance(data, list) else []
        return [v for v in items if v is not None]  # a step of another shape is no step
    if origin is dict:
        return {k: _legacy(args[1], v) for k, v in data.items()} if isinstance(data, dict) else None
    if isinstance(kind, type) and issubclass(kind, enum.Enum):
        return kind(data) if data in {m.value for m in kind} else None
    if dataclasses.is_dataclass(kind):
        return _legacy_section(kind, data)
    return data


def _legacy_section(kind: type, data: Any) -> Any:
    """A dataclass from an older record's dict; None where it is no dict or its values break the section's own
    checks (a bound of a kind no longer known)."""
    if not isinstance(data, dict):
        return None
    hints = typing.get_type_hints(kind)
    values = {}
    for f in dataclasses.fields(kind):
        if not f.init:
            continue
        value = _legacy(hints[f.name], data.get(f.name))
        defaulted = f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
        if value is not None or not defaulted:
            values[f.name] = value
    try:
        return kind(**values)
    except ValueError:
        return None
