"""The served figures under MLPerf's scenario names, with their stability, verdict and repeats.

- **SingleStream**: one user, one row per request, closed loop (`trainserve load --users 1 --batch 1`);
  its figure is the latency.
- **Server**: Poisson arrivals, latency from the scheduled send time, the highest rate whose p99 meets
  the SLO with at most 0.1% errors (`trainserve load --search`); its figure is that rate, the capacity
  the plan, cost and break-even use.
- **Offline**: saturated (`trainserve load --users N --batch B`); its figure is the throughput.

The closed-loop ramp stays a curve of its own. With `--repeats`, a figure is the repeats' mean with its
95% CI (report/common/stats.py), and the noise table says where a CPU-vs-GPU difference is smaller than the
noise of the two figures.
"""

from __future__ import annotations

from html import escape
from typing import Any

from trainserve.core.bounds import is_limit
from trainserve.core.servedparts import LoadParts
from trainserve.core.speedup import DEVICE_LABEL, DEVICES
from trainserve.report.common import units as u
from trainserve.report.common.collect import Entry
from trainserve.report.common.energy import own_energy
from trainserve.report.common.sections import NoiseRow, PerScenario, Report, ScenarioRow, Scenarios
from trainserve.report.common.stats import ci95, within_noise
from trainserve.report.verdict.verdict import reasons_of

SCENARIOS = ("SingleStream", "Server", "Offline")
# what each scenario's figure is, for the noise table: (metric key, label, formatter)
METRICS = {"SingleStream": ("p99_ms", "p99", u.ms), "Server": ("capacity_req_s", "capacity, req/s", u.num),
           "Offline": ("throughput_samples_s", "samples/s", u.num)}


def scenario_of(e: Entry) -> str | None:
    """The record's scenario: its own label, or for an older record the one its settings imply."""
    r = e.record
    if r.phase != "infer" or is_limit(r) or not isinstance(r.extra, dict):
        return None
    parts = LoadParts.of(r)
    if parts.ramp:
        return None
    named = parts.settings.scenario
    if named:
        return named if named in SCENARIOS else None
    if parts.search is not None:
        return "Server"
    if parts.settings.mode == "closed":
        return "SingleStream" if (r.concurrency or 1) == 1 and r.batch_size == 1 else "Offline"
    return None


def row(e: Entry, scenario: str) -> ScenarioRow:
    r = e.record
    lat = r.speed.latency
    parts = LoadParts.of(r)
    search, reps = parts.search, parts.repeats
    ci = {k: ci95([getattr(x, k) for x in reps]) for k in ("requests_s", "capacity_req_s", "p50_ms", "p95_ms",
                                                            "p99_ms")}
    ci["throughput_samples_s"] = ci["requests_s"] and {
        k: (v * r.batch_size if k not in ("n",) else v) for k, v in ci["requests_s"].items()}
    stability = r.validity.stability or {}
    reasons = reasons_of(e)
    energy = own_energy(r)
    return ScenarioRow(
        source=e.source, scenario=scenario, device=r.device, backend=r.backend, batch_size=r.batch_size,
        users=r.concurrency, requests_s=r.speed.requests_s, throughput_samples_s=r.speed.throughput_samples_s,
        capacity_req_s=search.capacity_req_s if search is not None and scenario == "Server" else None,
        lower_bound=search is not None and bool(search.lower_bound),
        stop_reason=None if search is None else search.stop_reason,
        slo_p99_ms=None if search is None else search.slo_p99_ms,
        p50_ms=lat.p50_ms, p95_ms=lat.p95_ms, p99_ms=lat.p99_ms,
        p999_ms=lat.p999_ms, count=lat.count, warmup_excluded=r.validity.warmup_excluded,
        percentiles_short=list(parts.percentiles_short), stable=stability.get("stable"),
        stability_reason=stability.get("reason"), valid=not reasons, reasons=[x["message"] for x in reasons],
        repeats=len(reps) or 1, ci95={k: v for k, v in ci.items() if v},
        energy_per_sample_j=energy.energy_per_sample_j, energy_source=r.energy.source, energy_status=energy.status)


def scenarios_section(entries: list[Entry], model_of: Any) -> Scenarios:
    """summary.json's "scenarios": per model and device, a row per scenario (None: not measured), and the
    noise table."""
    models: dict[str, dict[str, PerScenario]] = {}
    for e in sorted(entries, key=lambda e: e.record.created, reverse=True):  # the newest of each kind
        scenario = scenario_of(e)
        if scenario is None:
            continue
        per: PerScenario = models.setdefault(model_of(e.record), {}).setdefault(e.record.device,
                                                                                dict.fromkeys(SCENARIOS))
        if per[scenario] is None:
            per[scenario] = row(e, scenario)
    return Scenarios(models=models, noise=_noise(models))


def _noise(models: dict[str, dict[str, PerScenario]]) -> list[NoiseRow]:
    """CPU vs GPU per scenario, where repeats give at least one side a CI: is the difference above the noise?"""
    out = []
    for name, per in models.items():
        if not all(d in per for d in DEVICES):
            continue
        for scenario in SCENARIOS:
            key, label, _ = METRICS[scenario]
            a, b = per["cpu"][scenario], per["cuda"][scenario]
            if not a or not b or getattr(a, key) is None or getattr(b, key) is None:
                continue
            ca, cb = a.ci95.get(key), b.ci95.get(key)
            if ca is None and cb is None:
                continue
            pa = ca or {"mean": getattr(a, key), "half_width": 0.0}
            pb = cb or {"mean": getattr(b, key), "half_width": 0.0}
            out.append(NoiseRow(model=name, scenario=scenario, metric=key, label=label,
                                cpu=pa["mean"], cpu_half_width=pa["half_width"],
                                gpu=pb["mean"], gpu_half_width=pb["half_width"],
                                difference=pb["mean"] - pa["mean"], noise=pa["half_width"] + pb["half_width"],
                                within_noise=within_noise(pa, pb), one_side_only=ca is None or cb is None))
    return out


# --- rendering -------------------------------------------------------------------------------

def _figure(r: ScenarioRow) -> str:
    key, _, fmt = METRICS[r.scenario]
    value = getattr(r, key)
    if r.scenario == "Server" and value is None:
        return "no rate met the SLO"
    ci = r.ci95.get(key)
    shown = fmt(ci["mean"]) + f" ± {fmt(ci['half_width'])}" if ci else fmt(value)
    suffix = " (lower bound)" if r.scenario == "Server" and r.lower_bound else ""
    return {"SingleStream": f"p99 {shown}", "Server": f"{shown} req/s{suffix}",
            "Offline": f"{shown} samples/s"}[r.scenario]


def _cells(r: ScenarioRow) -> list[str]:
    stable = ("yes" if r.stable else "no: " + (r.stability_reason or "")) if r.stable is not None else "—"
    short = set(r.percentiles_short)
    return [_figure(r), *(u.ms(getattr(r, k)) + ("*" if k in short else "")
                          for k in ("p50_ms", "p95_ms", "p99_ms", "p999_ms")),
            f"{r.count:,}",
            stable, "VALID" if r.valid else "INVALID: " + "; ".join(r.reasons),
            str(r.repeats), r.source]


HEADER = ["device", "scenario", "figure (mean ± 95% CI with repeats)", "p50", "p95", "p99", "p99.9", "requests",
          "stable", "verdict", "repeats", "record"]
NOISE_HEADER = ["model", "scenario", "figure", "CPU", "GPU", "GPU − CPU", "noise (CIs added)", "reading"]


def _rows(section: Scenarios) -> list[tuple[str, list[str]]]:
    out = []
    for name, per in section.models.items():
        for d in (d for d in DEVICES if d in per):
            for scenario in SCENARIOS:
                r = per[d].get(scenario)
                cells = _cells(r) if r else ["not measured"] + [""] * (len(HEADER) - 3)
                out.append((name, [DEVICE_LABEL[d], scenario, *cells]))
    return out


def _noise_rows(section: Scenarios) -> list[list[str]]:
    out = []
    for n in section.noise:
        fmt = METRICS[n.scenario][2]
        reading = ("smaller than its noise: no winner" if n.within_noise else "larger than its noise")
        if n.one_side_only:
            reading += " (one side repeated)"
        out.append([n.model, n.scenario, n.label, f"{fmt(n.cpu)} ± {fmt(n.cpu_half_width)}",
                    f"{fmt(n.gpu)} ± {fmt(n.gpu_half_width)}", fmt(n.difference), fmt(n.noise), reading])
    return out


def verdict_html(report: Report) -> str:
    v = report.verdict
    if v.result == "VALID":
        return (f"<section id='verdict'><h2>Result is: <span class='ok'>VALID</span></h2><p class='muted'>"
                f"{v.checked} records checked: every load figure stabilised, no client saturated, errors within "
                "0.1%, no figure withheld, enough requests for each p99; and against each other: every peak holds "
                "its parts, every meter is its record's own device's, every memory comparison has a working set on "
                "both sides or says why, every version is known.</p></section>")
    items = "".join(f"<li><b>{escape(r['kind'])}</b> <code>{escape(r['source'] or '')}</code>: {escape(r['message'])}"
                    "</li>" for r in v.reasons)
    return (f"<section id='verdict'><h2>Result is: <span class='err'>INVALID</span></h2><p>The headline states only "
            f"valid figures. Every reason:</p><ul class='conclusions'>{items}</ul></section>")


def verdict_md(report: Report) -> list[str]:
    v = report.verdict
    if v.result == "VALID":
        return [f"**Result is: VALID** ({v.checked} records checked, each on its own and against each other)", ""]
    return (["**Result is: INVALID** — every reason (the headline states only valid figures):", ""]
            + [f"- {r['kind']} `{r['source'] or ''}`: {r['message']}" for r in v.reasons] + [""])


def html_section(report: Report) -> str:
    section = report.scenarios
    if not section.models:
        return ""
    body = "".join("<tr>" + "".join(f"<td>{escape(c)}</td>" for c in cells) + "</tr>" for _, cells in _rows(section))
    out = [f"<section id='scenarios'><h2>Scenarios (MLPerf's names)</h2><p class='muted'>{escape(_LEGEND)}</p>",
           "<div class='tablewrap'><table><thead><tr>" + "".join(f"<th>{escape(h)}</th>" for h in HEADER)
           + f"</tr></thead><tbody>{body}</tbody></table></div>"]
    noise = _noise_rows(section)
    if noise:
        out.append("<h3>Differences and their noise</h3><div class='tablewrap'><table><thead><tr>"
                   + "".join(f"<th>{escape(h)}</th>" for h in NOISE_HEADER) + "</tr></thead><tbody>"
                   + "".join("<tr>" + "".join(f"<td>{escape(c)}</td>" for c in r) + "</tr>" for r in noise)
                   + "</tbody></table></div>")
    return "".join(out) + "</section>"


def md_section(report: Report, table: Any) -> list[str]:
    section = report.scenarios
    if not section.models:
        return []
    out = ["## Scenarios (MLPerf's names)", "", _LEGEND, ""] + table(HEADER, [c for _, c in _rows(section)])
    noise = _noise_rows(section)
    if noise:
        out += ["### Differences and their noise", ""] + table(NOISE_HEADER, noise)
    return out


_LEGEND = ("SingleStream: one user, batch 1, closed loop. Server: Poisson arrivals, latency from the scheduled "
           "send time, the highest rate whose p99 meets the SLO with ≤ 0.1% errors (the capacity the plan and "
           "cost use; with repeats, the median repeat's, while this table gives their mean ± 95% CI). Offline: saturated. Each figure after an uncounted warm-up, from windows that agree "
           "(3 within 10%) or a minimum duration and request count. * fewer requests than the percentile "
           "needs (p95: 100, p99: 500, p99.9: 5,000).")
