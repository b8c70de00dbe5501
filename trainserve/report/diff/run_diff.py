"""Two runs side by side: what differs between them, and which figures changed beyond the noise.

`load_run` reads a run's summary.json back into the report's sections (report/common/typed.py); `figures` flattens
a report into comparable figures, each keyed by model, device, scenario and figure name and carrying its
operating point (batch, users, SLO, precision); `diff_runs` matches two runs' figures and tests each change.

A change is beyond the noise when:
- both runs have repeats (a standard deviation over n >= 2): Welch's t-test, p < 0.05 ("welch");
- one run has repeats: the other's value lies outside its 95% CI and the change exceeds the noise band
  (the single run's own spread is unknown, so the band stands for it) ("ci");
- neither: the change exceeds the noise band, e.g. ±5% ("band").
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainserve.core.errors import UserError
from trainserve.report.common.sections import ModelSection, Report
from trainserve.report.common.stats import t95
from trainserve.report.common.typed import from_json

ALPHA = 0.05  # Welch's two-sided test: a change is real below this p
SCENARIO_ORDER = ("Server", "SingleStream", "Offline", "train", "time_to_accuracy", "limits")


@dataclass(frozen=True)
class Kind:
    """What a figure name means: its label, unit and which way is better."""
    label: str
    unit: str
    higher_is_better: bool


# the figure names --fail-on takes
KINDS: dict[str, Kind] = {
    "server_capacity": Kind("Server capacity within the SLO", "requests/s", True),
    "throughput": Kind("throughput", "samples/s", True),
    "p50": Kind("p50 latency", "ms", False),
    "p95": Kind("p95 latency", "ms", False),
    "p99": Kind("p99 latency", "ms", False),
    "p999": Kind("p99.9 latency", "ms", False),
    "train_throughput": Kind("training throughput", "samples/s", True),
    "train_best_throughput": Kind("training throughput at the sweep's best point", "samples/s", True),
    "time_to_accuracy": Kind("time to target accuracy", "s", False),
    "limit_p50": Kind("in-process batch-1 p50", "ms", False),
    "limit_throughput": Kind("in-process best throughput", "samples/s", True),
}
_SCENARIO_FIGURES = (("server_capacity", "capacity_req_s"), ("throughput", "throughput_samples_s"),
                     ("p50", "p50_ms"), ("p95", "p95_ms"), ("p99", "p99_ms"), ("p999", "p999_ms"))


@dataclass(frozen=True)
class Spread:
    """A figure's repeats: n, mean, standard deviation, and the 95% CI's half-width (Student's t)."""
    n: int
    mean: float
    sd: float
    half_width: float

    @classmethod
    def of(cls, n: int, mean: float, sd: float) -> Spread:
        return cls(n, mean, sd, t95(n - 1) * sd / math.sqrt(n))


@dataclass(frozen=True)
class Figure:
    """One figure of one run."""
    model: str
    device: str
    scenario: str  # Server, SingleStream, Offline, train, time_to_accuracy, limits
    name: str  # a KINDS key
    value: float  # the mean of the repeats where there are repeats
    spread: Spread | None
    point: dict[str, Any]  # the operating point it was measured at: batch, users, SLO, precision

    @property
    def key(self) -> tuple[str, str, str, str]:
        return (self.model, self.device, self.scenario, self.name)

    @property
    def where(self) -> str:
        return f"{self.model} {self.device} {self.scenario}"


@dataclass
class RunInfo:
    """A run as the diff names it, and what it ran on."""
    name: str
    summary_path: str
    host: dict[str, Any]
    versions: dict[str, str]
    card: dict[str, Any]
    options: dict[str, Any] | None  # run.json beside the report, None when the run has none


@dataclass
class Difference:
    """One thing that differs between the runs: a host field, a version, a model-card entry, an option."""
    section: str  # host, versions, card, options
    name: str
    a: Any
    b: Any


@dataclass
class Change:
    """One figure both runs have at the same operating point."""
    model: str
    device: str
    scenario: str
    name: str
    label: str
    unit: str
    higher_is_better: bool
    a: float
    b: float
    a_spread: Spread | None
    b_spread: Spread | None
    change_pct: float | None  # (B - A) / A, in %; None when A is 0
    direction: str  # better, worse, same
    beyond_noise: bool
    method: str  # welch, ci, band
    p_value: float | None  # Welch's, where both runs have repeats
    point: dict[str, Any]


@dataclass
class Apart:
    """A figure that cannot be compared: only one run has it, or the two measured it at other operating points."""
    model: str
    device: str
    scenario: str
    name: str
    reason: str  # only_a, only_b, operating_point
    a: float | None
    b: float | None
    a_point: dict[str, Any] | None
    b_point: dict[str, Any] | None


@dataclass
class Diff:
    """Run B against run A: why they may differ, then how much each figure moved."""
    a: RunInfo
    b: RunInfo
    noise_pct: float
    differences: list[Difference]
    changes: list[Change]
    apart: list[Apart] = field(default_factory=list)


# --- reading a run ---------------------------------------------------------------------------------

def summary_path(spec: str, runs_dir: Path | None = None) -> Path:
    """The summary.json a run argument names: a summary.json, a report folder, a run folder, or a run's name
    in the runs folder. A UserError that says what to do when there is none."""
    from trainserve.core.runs import default_runs_dir

    where = Path(runs_dir if runs_dir is not None else default_runs_dir())
    given = Path(spec)
    if not given.exists() and (where / spec).exists():
        given = where / spec
    if given.is_file():
        return given
    if not given.exists():
        raise UserError(f"run {spec!r} not found: neither a path nor a run in {where}; pass a run's name, its "
                        "folder or its summary.json")
    for candidate in (given / "summary.json", given / "report" / "summary.json"):
        if candidate.is_file():
            return candidate
    raise UserError(f"{given} is not a run with a report (no summary.json in it or in its report/); run "
                    "`trainserve report --run NAME` for it first")


def load_run(spec: str, runs_dir: Path | None = None) -> tuple[RunInfo, Report]:
    """A run's identity and its report sections, read from its summary.json (and run.json when beside it)."""
    path = summary_path(spec, runs_dir)
    try:
        report: Report = from_json(Report, json.loads(path.read_text()))
    except (OSError, ValueError, TypeError) as e:
        raise UserError(f"{path} is not a summary.json this version of trainserve reads ({e})") from None
    return run_info(report, path, run_options(path)), report


def run_options(summary: Path) -> dict[str, Any] | None:
    """The run.json beside a run's summary.json (in its folder or the run's), None when there is none."""
    for run_json in (summary.parent / "run.json", summary.parent.parent / "run.json"):
        if run_json.is_file():
            try:
                return json.loads(run_json.read_text())
            except (OSError, ValueError):
                return None
    return None


def run_info(report: Report, summary: Path, options: dict[str, Any] | None) -> RunInfo:
    """A report's identity for the diff: its host, versions, flattened model card, and options."""
    m = report.machines[0] if report.machines else None
    host = {} if m is None else {
        "CPU": m.cpu_model, "logical CPUs": m.logical_cpus,
        "memory (GiB)": None if m.memory_bytes is None else round(m.memory_bytes / 2**30, 1),
        "GPUs": ", ".join(m.gpus) or "none", "platform": m.platform, "python": m.python}
    return RunInfo(report.run, str(summary), host, dict(report.versions), _flat(report.card or {}), options)


def _flat(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


# --- a report as figures ---------------------------------------------------------------------------

def figures(report: Report) -> list[Figure]:
    """Every figure of a report the diff compares, with its operating point."""
    out = _scenario_figures(report)
    for model, section in report.models.items():
        out += _training_figures(model, section)
        out += _limit_figures(model, section)
    return out


def _scenario_figures(report: Report) -> list[Figure]:
    """The served figures, per model, device and scenario, each with its repeats' spread where there were repeats."""
    out: list[Figure] = []
    for model, devices in report.scenarios.models.items():
        for device, per in devices.items():
            for scenario, row in per.items():
                if row is None:
                    continue
                point: dict[str, Any] = {"backend": row.backend, "batch": row.batch_size}
                if scenario == "Server":
                    point["SLO p99 ms"] = row.slo_p99_ms
                else:
                    point["users"] = row.users
                for name, attr in _SCENARIO_FIGURES:
                    ci = row.ci95.get(attr)
                    value = ci["mean"] if ci else getattr(row, attr)
                    if value is None:
                        continue
                    spread = Spread(ci["n"], ci["mean"], ci["sd"], ci["half_width"]) if ci else None
                    out.append(Figure(model, device, scenario, name, float(value), spread, point))
    return out


def _training_figures(model: str, section: ModelSection) -> list[Figure]:
    """A model's training figures: samples/s as trained and at its best batch, and the time to accuracy."""
    out: list[Figure] = []
    for device, col in section.train.items():
        if col is not None and col.throughput_samples_s is not None:
            out.append(Figure(model, device, "train", "train_throughput", col.throughput_samples_s, None,
                              {"batch": col.batch_size, "precision": col.precision}))
    for device, sweep in section.operating_points.items():
        best = sweep.train_best
        if best is not None and best.throughput_samples_s is not None:
            out.append(Figure(model, device, "train", "train_best_throughput", best.throughput_samples_s, None,
                              {}))  # each run at its own best: the point is part of the answer
    for device, tta in section.time_to_accuracy.items():
        if not tta.reached or tta.time_to_accuracy_s is None:
            continue
        seeds = tta.seeds or {}
        spread = None
        if (seeds.get("n") or 0) >= 2 and seeds.get("sd_seconds") is not None:
            spread = Spread.of(seeds["n"], seeds["mean_seconds"], seeds["sd_seconds"])
        out.append(Figure(model, device, "time_to_accuracy", "time_to_accuracy",
                          spread.mean if spread else tta.time_to_accuracy_s, spread,
                          {"target": tta.target_accuracy, "batch": tta.batch_size, "precision": tta.precision}))
    return out


def _limit_figures(model: str, section: ModelSection) -> list[Figure]:
    """A model's in-process limits: the batch-1 p50 floor and the best samples/s, per device."""
    out: list[Figure] = []
    for device, lim in section.limits.items():
        if lim.batch1_p50_ms is not None:
            out.append(Figure(model, device, "limits", "limit_p50", lim.batch1_p50_ms, None, {"batch": 1}))
        if lim.best_throughput_samples_s is not None:
            out.append(Figure(model, device, "limits", "limit_throughput", lim.best_throughput_samples_s,
                              None, {}))
    return out


# --- comparing -------------------------------------------------------------------------------------

def parse_noise(text: str) -> float:
    """'5%' or '5' -> 5.0 (percent); a UserError for anything else."""
    s = text.strip().removesuffix("%").strip()
    try:
        value = float(s)
    except ValueError:
        raise UserError(f"--noise {text!r} is not a percentage; give e.g. --noise 5%") from None
    if not 0 <= value < 1000:
        raise UserError(f"--noise {text!r} is out of range; give a percentage from 0 to 1000, e.g. 5%")
    return value


def compare(a: Figure, b: Figure, noise_pct: float) -> Change:
    """B against A for one figure: the change, its direction, and whether it is beyond the noise."""
    kind = KINDS[a.name]
    change = None if a.value == 0 else (b.value - a.value) / abs(a.value) * 100
    beyond_band = change is not None and abs(change) > noise_pct
    p = None
    if a.spread is not None and b.spread is not None:
        method = "welch"
        p = welch_p(a.spread, b.spread)
        beyond = p < ALPHA
    elif a.spread is not None or b.spread is not None:
        method = "ci"
        s, other = (a.spread, b.value) if a.spread is not None else (b.spread, a.value)
        assert s is not None
        beyond = abs(other - s.mean) > s.half_width and beyond_band
    else:
        method = "band"
        beyond = beyond_band
    if b.value == a.value:
        direction = "same"
    else:
        direction = "better" if (b.value > a.value) == kind.higher_is_better else "worse"
    return Change(a.model, a.device, a.scenario, a.name, kind.label, kind.unit, kind.higher_is_better, a.value,
                  b.value, a.spread, b.spread, change, direction, beyond, method, p, a.point)


def welch_p(a: Spread, b: Spread) -> float:
    """Welch's two-sided p for two means from their repeats (scipy.stats); 1.0 for identical figures."""
    if a.sd == 0 and b.sd == 0:
        return 1.0 if a.mean == b.mean else 0.0  # no spread at all: any difference is real
    from scipy import stats

    result = stats.ttest_ind_from_stats(a.mean, a.sd, a.n, b.mean, b.sd, b.n, equal_var=False)
    return float(result.pvalue)


def differences(a: RunInfo, b: RunInfo) -> list[Difference]:
    """What differs between the runs' hosts, versions, model cards and options, in that order."""
    out: list[Difference] = []
    sides: list[tuple[str, dict[str, Any] | None, dict[str, Any] | None]] = [
        ("host", a.host, b.host), ("versions", a.versions, b.versions), ("card", a.card, b.card),
        ("options", a.options, b.options)]
    for section, da, db in sides:
        if da is None or db is None:
            if da is not db:
                out.append(Difference(section, "run.json", "recorded" if da else "not recorded",
                                      "recorded" if db else "not recorded"))
            continue
        for name in list(da) + [k for k in db if k not in da]:
            if da.get(name) != db.get(name):
                out.append(Difference(section, name, da.get(name), db.get(name)))
    return out


def diff_runs(a_info: RunInfo, a: Report, b_info: RunInfo, b: Report, noise_pct: float = 5.0) -> Diff:
    """Run B against run A: the differences, the figures both have at one operating point, and the rest apart."""
    fa = {f.key: f for f in figures(a)}
    fb = {f.key: f for f in figures(b)}
    changes: list[Change] = []
    apart: list[Apart] = []
    for key in sorted(fa.keys() | fb.keys(), key=_order):
        x, y = fa.get(key), fb.get(key)
        if x is not None and y is not None and x.point == y.point:
            changes.append(compare(x, y, noise_pct))
            continue
        reason = "only_a" if y is None else "only_b" if x is None else "operating_point"
        apart.append(Apart(*key, reason, x and x.value, y and y.value, x and x.point, y and y.point))
    return Diff(a_info, b_info, noise_pct, differences(a_info, b_info), changes, apart)


def _order(key: tuple[str, str, str, str]) -> tuple[Any, ...]:
    model, device, scenario, name = key
    return (model, device, SCENARIO_ORDER.index(scenario) if scenario in SCENARIO_ORDER else 99,
            list(KINDS).index(name))
