"""Every sentence the report states, built here from the typed sections (report/common/sections.py) and from
the cost and plan sections (report/common/cost_sections.py).

Only what was measured is stated; a side that was not measured is said to be so. analysis.py keeps
the conclusions and the headline in the Report (summary.json's "conclusions" and "headline"), capacity_plan.py
its lines in the plan; the renderers and the CLI show them.
"""

from __future__ import annotations

from collections.abc import Collection

from trainserve.core.speedup import DEVICE_LABEL
from trainserve.report.common import units as u
from trainserve.report.common.cost_sections import (
    BASIS,
    SERVER,
    Costs,
    DevicePlan,
    DeviceServing,
    GpuPriceBreakEven,
    ModelCosts,
    Plan,
    RunCost,
    TrainCost,
)
from trainserve.report.common.sections import (
    AttributionPoint,
    HeadlineConclusion,
    HeadlineSpeedup,
    MemoryCompare,
    MemoryFigure,
    ModelSection,
    ServerVsLimit,
    TrainSpeedup,
)


def conclusions(s: ModelSection, invalid: Collection[str] = ()) -> list[str]:
    """A model's conclusions, in the order the Summary lists them. One that rests on a record the verdict found
    INVALID (`invalid`: its invalid_sources) says so at its end, naming the record."""
    bad = set(invalid)
    out = []
    for text, sources in _conclusions(s):
        hit = sorted(sources & bad)
        out.append(text + (f" Not valid: it rests on {', '.join(hit)} (see the verdict)." if hit else ""))
    return out


def _conclusions(s: ModelSection) -> list[tuple[str, set[str]]]:
    """Each conclusion with the records it rests on (training records are not judged by the verdict)."""
    served = {d: _served_sources(s, d) for d in DEVICE_LABEL}
    saturated = {d: _served_sources(s, d, ("saturated",)) for d in DEVICE_LABEL}
    every = set().union(*served.values())
    return ([(t, every) for t in speedup_sentences(s)] + [(t, set()) for t in _not_measured(s)]
            + [(t, saturated[d]) for d, t in _train_vs_infer(s)]
            + [(t, served[d]) for d, t in _memory(s.model, s.memory_compare)]
            + [(t, set()) for t in _sweeps(s) + _max_batch(s)] + [(t, served[d]) for d, t in _limits(s)]
            + [(t, set()) for t in _mfu(s)] + [(t, {src}) for src, t in _server_adds(s)]
            + [(t, {src}) for src, t in _capacities(s)])


def _served_sources(s: ModelSection, device: str, kinds: tuple[str, ...] = ("batch1", "saturated")) -> set[str]:
    """The served records of `device` (every backend's): batch 1 and saturated, or those of `kinds`."""
    out = set()
    for per in s.infer.values():
        served = per.get(device)
        for column in (getattr(served, k) for k in kinds) if served else ():
            if column is not None and column.source:
                out.add(column.source)
    return out


def headline(models: dict[str, ModelSection]) -> list[HeadlineSpeedup | HeadlineConclusion]:
    """Per model: the training speedup on each basis (always both, value None when not measured),
    then the model's first conclusion. verdict.screen_headline replaces an entry resting on INVALID figures."""
    out: list[HeadlineSpeedup | HeadlineConclusion] = []
    for name, m in models.items():
        for sp in (m.speedups.train, m.speedups.train_best):
            out.append(HeadlineSpeedup(model=name, kind="train_speedup", basis=sp.basis, value=sp.value,
                                       cpu=sp.cpu_point, gpu=sp.gpu_point, note=sp.note,
                                       text=f"{name}: {train_speedup_text(sp)}"))
        if m.conclusions:
            out.append(HeadlineConclusion(model=name, kind="conclusion", basis=None, value=None,
                                          text=m.conclusions[0]))
    return out


def train_speedup_text(sp: TrainSpeedup) -> str:
    """One clause for a training speedup entry, with its basis and configurations."""
    label = "at the same configuration" if sp.basis == "same_config" else "each device at its best"
    if sp.value is None:
        return f"training speedup {label}: {sp.note}"
    c, g = sp.cpu_point, sp.gpu_point
    assert c is not None and g is not None  # a value has both sides
    where = (f"batch {c.batch_size}, {c.precision} on both" if sp.basis == "same_config"
             else f"GPU batch {g.batch_size} {g.precision} vs CPU batch {c.batch_size} {c.precision}")
    return (f"training speedup {label}: {u.ratio(sp.value)} "
            f"({u.num(sp.gpu)} vs {u.num(sp.cpu)} samples/s; {where})")


# --- GPU vs CPU ----------------------------------------------------------------------------------

def speedup_sentences(s: ModelSection) -> list[str]:
    """One sentence of every GPU-vs-CPU ratio measured; none when no ratio was."""
    tr, best = s.speedups.train, s.speedups.train_best
    b1, sat = s.speedups.infer_batch1, s.speedups.infer_saturated
    parts = []
    if tr.value is not None:
        c = tr.cpu_point
        same = f" at the same batch {c.batch_size} and {c.precision}" if c and c.batch_size else ""
        parts.append(f"the GPU trains {_times(tr.value)} the CPU ({u.num(tr.gpu)} vs {u.num(tr.cpu)} samples/s){same}")
    if best.value is not None:
        assert best.cpu_point is not None and best.gpu_point is not None
        faster = _times(best.value).removesuffix(" than")
        parts.append(f"each at its best, {faster} ({u.num(best.gpu)} samples/s at GPU batch "
                     f"{best.gpu_point.batch_size} {best.gpu_point.precision} vs {u.num(best.cpu)} at CPU batch "
                     f"{best.cpu_point.batch_size} {best.cpu_point.precision})")
    if b1.value is not None:
        only = "only " if tr.value is not None and b1.value < tr.value / 2 and b1.value >= 1 else ""
        verb = (f"it answers {only}{u.ratio(b1.value)} faster" if b1.value >= 1
                else f"it answers {u.ratio(1 / b1.value)} slower than the CPU")
        parts.append(f"at batch 1 {verb} (p50 {u.ms(b1.gpu)} vs {u.ms(b1.cpu)}){in_process_batch1(s)}")
    if sat.value is not None:
        parts.append(f"saturated, it serves {u.ratio(sat.value)} the CPU's throughput "
                     f"({u.num(sat.gpu)} vs {u.num(sat.cpu)} samples/s)")
    return [f"{s.model}: " + "; ".join(parts) + "."] if parts else []


def _not_measured(s: ModelSection) -> list[str]:
    if "cuda" not in s.devices_measured:
        return [f"{s.model}: GPU not measured — this run has no CUDA records, so there is no CPU-vs-GPU speedup."]
    if "cpu" not in s.devices_measured:
        return [f"{s.model}: CPU not measured — this run has no CPU records, so there is no CPU-vs-GPU speedup."]
    return []


def _times(x: float) -> str:
    return f"{u.ratio(x)} faster than" if x >= 1 else f"{u.ratio(1 / x)} slower than"


def _where(device: str) -> str:
    return "on the GPU" if device == "cuda" else "on the CPU"


# --- training beside inference -------------------------------------------------------------------

def _train_vs_infer(s: ModelSection) -> list[tuple[str, str]]:
    """(device, sentence) pairs."""
    out = []
    for d, tv in s.train_vs_infer.items():
        if tv.throughput_ratio is not None:
            out.append((d, f"{s.model} {_where(d)}: serving at saturation handles {u.num(tv.infer_throughput_samples_s)} "
                       f"samples/s, {u.ratio(tv.throughput_ratio)} the training throughput of "
                       f"{u.num(tv.train_throughput_samples_s)} samples/s."))
        if tv.energy_ratio is not None:
            how = " (estimated: the CPU's TDP × its measured utilisation, no energy meter read)" \
                if tv.energy_estimated else ""
            out.append((d, f"{s.model} {_where(d)}: a training sample costs {u.joules(tv.train_energy_per_sample_j)}, "
                       f"an inference sample {u.joules(tv.infer_energy_per_sample_j)} ({_less(tv.energy_ratio)})"
                       f"{how}."))
    return out


def _less(ratio: float) -> str:
    """Training's figure over inference's, in words."""
    if ratio >= 1.15:
        return f"{u.ratio(ratio)} less than training"
    if ratio > 1 / 1.15:
        return "about the same as training"
    return f"{u.ratio(1 / ratio)} more than training"


def memory(name: str, compare: dict[str, MemoryCompare]) -> list[str]:
    """One sentence per device and kind of memory figure that has both sides (report/memory/memory_compare.py)."""
    return [t for _, t in _memory(name, compare)]


def _memory(name: str, compare: dict[str, MemoryCompare]) -> list[tuple[str, str]]:
    out = []
    for d, c in compare.items():
        for kind, label in (("working_set", "working set"), ("process_total", "process total")):
            t, i, r = getattr(c.train, kind), getattr(c.infer, kind), getattr(c.ratios, kind)
            if r is None:
                continue
            at = f" at batch {t.batch_size}" if kind == "working_set" else ""
            out.append((d, f"{name} {_where(d)}, {label}{at}: training {u.nbytes(t.bytes)}{_shares(t)}, inference "
                       f"{u.nbytes(i.bytes)} ({u.ratio(r)} as much for training)."))
    return out


def _shares(figure: MemoryFigure) -> str:
    """" (weights 25%, gradients 25%, ...)": training's working set by part, where counted."""
    parts = [(k, v) for k, v in (figure.parts or {}).items() if v]
    total = sum(v for _, v in parts)
    if not total:
        return ""
    return " (" + ", ".join(f"{k} {100 * v / total:.0f}%" if 100 * v / total >= 0.5 else f"{k} <1%"
                            for k, v in parts) + ")"


def _sweeps(s: ModelSection) -> list[str]:
    out = []
    for d, op in s.operating_points.items():
        b = op.train_best
        if b is not None:
            n = len({p.batch_size for p in op.train})
            out.append(f"{s.model}: training on the {DEVICE_LABEL[d]} is fastest at batch {b.batch_size} "
                       f"{b.precision} ({u.num(b.throughput_samples_s)} samples/s, peak "
                       f"{u.nbytes(b.peak_bytes)}; {n} batch sizes swept).")
    return out


def _max_batch(s: ModelSection) -> list[str]:
    return [f"{s.model}: the largest batch that fits on the {DEVICE_LABEL[d]} is {u.num(mb.train)} for "
            f"training and {u.num(mb.infer)} for inference ({u.ratio(mb.ratio)})."
            for d, mb in s.max_batch.items() if mb.train and mb.infer]


def _mfu(s: ModelSection) -> list[str]:
    """The GPU training's MFU, or why it was withheld."""
    t = s.train.get("cuda")
    if t and t.mfu is not None:
        math = f"{t.precision}, {t.math_mode} math" if t.math_mode else t.precision
        return [f"{s.model}: GPU training reaches {u.fraction(t.mfu)} MFU "
                f"({u.tflops(t.achieved_tflops)}, {math}, {t.device_name or 'GPU'})."]
    err = t.errors.get("mfu") if t else None
    return [f"{s.model}: GPU training MFU withheld — {err['error']}."] if err else []


# --- served beside the in-process limit (report/serving/limits_section.py) ---------------------------------------

def in_process_batch1(s: ModelSection) -> str:
    """The in-process twin of the served batch-1 ratio: ", 3.1x in process (p50 0.10 ms vs 0.31 ms)"."""
    value = s.limit_speedups.infer_batch1
    if value is None:
        return ""
    cpu, gpu = s.limits["cpu"].batch1_p50_ms, s.limits["cuda"].batch1_p50_ms
    return f", {u.ratio(value)} in process (p50 {u.ms(gpu)} vs {u.ms(cpu)})"


def limits(s: ModelSection) -> list[str]:
    """One sentence per device: what the server adds at batch 1, and the share of the in-process peak it reaches."""
    return [t for _, t in _limits(s)]


def _limits(s: ModelSection) -> list[tuple[str, str]]:
    out = []
    for d, lim in s.limits.items():
        svl = s.server_vs_limit.get(d) or ServerVsLimit(None, None)
        b1 = f"onnxruntime in process answers batch 1 in {u.ms(lim.batch1_p50_ms)} ({lim.batch1_threads} " \
             f"thread{'s' if lim.batch1_threads != 1 else ''})"
        if svl.batch1_overhead_ms is not None:
            # the client's view; what the server itself adds comes from its own statistics (server_adds)
            b1 += f"; the served p50 is {u.ms(svl.batch1_overhead_ms)} above that"
        peak = f"its best is {u.num(lim.best_throughput_samples_s)} samples/s at batch {lim.best_batch}"
        if svl.saturated_efficiency is not None:
            peak += f", of which the saturated server reaches {u.fraction(svl.saturated_efficiency)}"
        out.append((d, f"{s.model} on the {DEVICE_LABEL[d]}: {b1}; {peak}."))
    return out


# --- where the served time goes (report/serving/attribution_section.py) ------------------------------------------

def bound(p: AttributionPoint) -> str:
    """"GPU · batch 1 · 16 users: 5,012 req/s — bounded by the GPU: busy, ..."."""
    what = f"{u.num(p.requests_s)} req/s" if p.requests_s is not None else "no throughput"
    if not p.bound:
        return f"{p.label}: {what} — bound not measured (a record from before attribution)."
    return f"{p.label}: {what} — bounded by {p.bound['detail']}."


def capacities(s: ModelSection) -> list[str]:
    """One sentence per ramp: its highest load within the ramp's stop condition and what bounded it (the ramp is
    closed loop; the Server scenario's capacity, within the SLO, is what cost and plan use)."""
    return [t for _, t in _capacities(s)]


def _capacities(s: ModelSection) -> list[tuple[str, str]]:
    """(the ramp's record, sentence) pairs."""
    out = []
    for c in s.capacity_bounds:
        b = c.bound or {}
        where = f"{s.model} on the {DEVICE_LABEL[c.device]}"
        if c.requests_s is None:
            out.append((c.source, f"{where}: no step of the closed-loop ramp met its stop condition; "
                                    f"{b.get('detail', 'bound not measured')}."))
            continue
        slo = f" (p99 ≤ {c.slo_p99_ms:g} ms)" if c.slo_p99_ms else ""
        out.append((c.source, f"{where}: the closed-loop ramp's highest load within its stop condition{slo} is "
                   f"{u.num(c.requests_s)} req/s at {c.users} users, bounded by {b.get('detail', 'a limit not measured')}"
                   f"; {_not_capacity(s, c.device)}."))
    return out


def _not_capacity(s: ModelSection, device: str) -> str:
    """What a ramp's figure is beside the Server scenario's: closed-loop users set a ramp's rate, so it is not the
    capacity; the capacity that cost and plan use is the Server scenario's, named as such."""
    row = (s.scenarios.get(device) or {}).get("Server")
    if row is None or row.capacity_req_s is None:
        return "a closed-loop figure set by its users, not a capacity (the Server scenario was not measured)"
    at_least = "at least " if row.lower_bound else ""
    return (f"a closed-loop figure set by its users, not a capacity: the Server scenario's capacity, Poisson arrivals "
            f"within p99 ≤ {row.slo_p99_ms:g} ms, is {at_least}{u.num(row.capacity_req_s)} req/s")


def server_adds(s: ModelSection) -> list[str]:
    """Per device, from its lightest plain load point: what the server adds, by its own statistics (never the
    client's latency minus an in-process one)."""
    return [t for _, t in _server_adds(s)]


def _server_adds(s: ModelSection) -> list[tuple[str, str]]:
    """(the load record, sentence) pairs."""
    out = []
    for d in ("cpu", "cuda"):
        mine = [(p, p.attribution) for p in s.attribution if p.device == d and p.attribution
                and p.attribution.server_ms is not None and "(ramp)" not in p.label]
        if not mine:
            continue
        p, a = min(mine, key=lambda pa: (pa[0].batch_size, pa[1].latency_ms))
        client = f"the client's own time {u.ms(a.client)}, " if a.client is not None else ""
        out.append((p.source, f"{s.model} on the {DEVICE_LABEL[d]} ({p.label}): the server adds {u.ms(a.server_ms)} "
                   f"by its own statistics (queue {u.ms(a.queue)}, compute {u.ms(a.compute)}, front end "
                   f"{u.ms(a.frontend)}); of the client's mean latency {u.ms(a.latency_ms)}, {client}"
                   f"network and the rest {u.ms(a.network)}."
                   + ("" if a.consistent else f" Inconsistent: {a.note}.")))
    return out


# --- what it costs (report/common/cost_sections.py) -------------------------------------------------------

def held(x: DeviceServing | TrainCost) -> str:
    if x.units is None:
        return "not known"
    if x.usd_per_hour is None:
        return f"{x.units} {x.unit}{'s' if x.units != 1 else ''}, no price"
    return f"{x.units} {x.unit}{'s' if x.units != 1 else ''}, {u.usd(x.usd_per_hour)}/h"


def assumptions(c: Costs) -> list[str]:
    p = c.prices
    return [
        f"CPU: {u.price(p.cpu_core_hour_usd)} per logical-CPU-hour — {p.cpu_offer}.",
        *gpu_price_lines(c),
        f"Electricity: {u.price(p.kwh_usd)} per kWh — {p.kwh_offer}.",
        f"Source: {p.source}; date: {p.date}.",
        "Held: a training run holds its torch threads' cores or its GPUs; a CPU server every logical CPU of its "
        "host (it was not pinned); a GPU server its GPU. Hardware $ = held × price per hour ÷ throughput.",
        f"SLO: p99 ≤ {c.slo_p99_ms:g} ms, over one-row requests with no failed request.",
        "Energy: the device's own energy × the kWh price: measured by NVML for a GPU and RAPL for a CPU, or where "
        "RAPL is unreadable estimated as the CPU's TDP × its measured utilisation (marked ≈ … (estimated)); cloud "
        "prices already include power, so it is what electricity adds on owned hardware. Elsewhere: not measured.",
    ]


def gpu_price_lines(c: Costs) -> list[str]:
    """One line per GPU the models ran on: its price per GPU-hour and where that price comes from."""
    lines = []
    for gp in dict.fromkeys(m.gpu_price for m in c.models.values() if m.gpu_price):  # each price once, in order
        gpu = gp.device_name or "name not recorded"
        if gp.usd_per_gpu_hour is None:
            lines.append(f"GPU ({gpu}): {gp.note}.")
        elif gp.origin == "user":
            lines.append(f"GPU ({gpu}): {u.price(gp.usd_per_gpu_hour)} per GPU-hour — {gp.offer}.")
        else:
            lines.append(f"GPU ({gpu}): {u.price(gp.usd_per_gpu_hour, 4)} per GPU-hour (the host's share included) — "
                         f"{gp.offer}; source: {gp.source}; date: {gp.date}.")
    return lines


def price_break_even_line(name: str, m: ModelCosts) -> str:
    return break_even_price(name, m.gpu_price_break_even, (m.gpu_price.device_name if m.gpu_price else None) or "GPU")


def break_even_line(name: str, c: ModelCosts) -> str:
    be = c.break_even
    if be.break_even_req_s is not None:
        beyond = [DEVICE_LABEL[d] for d, cap in c.capacity_at_slo_req_s.items() if be.break_even_req_s > cap]
        note = (f" (beyond one {' and one '.join(beyond)} server's measured capacity: more servers assume linear "
                "scaling)") if beyond else ""
        return (f"{name}: serving on the GPU costs less than on CPU servers from {u.num(be.break_even_req_s)} "
                f"req/s up{note}.")
    return f"{name}: break-even — {be.note}."


def cost_lines(c: Costs | None, plan: Plan | None) -> list[str]:
    """A few lines for the terminal: the cheapest unit costs and the break-even, per model; then the plan."""
    if not c:
        return []
    lines = []
    for name, m in c.models.items():
        for d, dev in m.infer.items():
            parts = [f"{u.usd(r.usd_per_million_inferences)}/M inferences at {BASIS[r.basis]} "
                     f"({u.num(r.throughput_samples_s)}/s)" for r in dev.rows if r.basis != "batch1"]
            lines.append(f"cost {name} · {DEVICE_LABEL[d]} serving ({held(dev)}): " + "; ".join(parts))
        for d, rows in m.train.items():
            r = rows[0]
            run = r.run
            priced = isinstance(run, RunCost) and run.usd is not None
            per_run = (f"; the run ({u.num(run.samples)} samples): {u.usd(run.usd)}, "
                       f"{u.num(run.hardware_hours)} {r.unit}-hours" if priced else "")
            lines.append(f"cost {name} · {DEVICE_LABEL[d]} training at {BASIS[r.basis]} (batch "
                         f"{r.batch_size} {r.precision}): {u.usd(r.usd_per_million_samples)}/M samples"
                         f"{per_run}")
        if m.infer:
            lines.append("cost " + break_even_line(name, m))
            lines.append("cost " + price_break_even_line(name, m))
    if plan:
        for name, mp in plan.models.items():
            lines += [f"plan {name}: {line}" for line in mp.lines]
    return lines


def break_even_price(name: str, be: GpuPriceBreakEven, gpu_label: str) -> str:
    """The break-even price in words, with where the GPU's own price stands."""
    if be.break_even_usd_per_gpu_hour is None:
        return f"{name}: GPU price break-even — {be.note}."
    where = ("the planned" if be.load_basis == "plan" else "one GPU's capacity within the SLO,")
    p = be.break_even_usd_per_gpu_hour
    text = (f"{name}: at {where} {be.load_req_s:,.0f} req/s, {be.gpus} GPU{'s' if be.gpus > 1 else ''} "
            f"cost{'' if be.gpus > 1 else 's'} less than {be.cpu_servers} CPU server{'s' if be.cpu_servers > 1 else ''} "
            f"({u.cents(be.cpu_usd_per_hour)}/h) below {u.cents(p)} per GPU-hour")
    own = be.gpu_usd_per_gpu_hour
    if own is None:
        return text + f"; the {gpu_label} has no price."
    verdict = "cheaper" if be.gpu_cheaper else "dearer"
    return text + f"; at its price of {u.cents(own)} per GPU-hour the {gpu_label} is {verdict}."


def plan_lines(devices: dict[str, DevicePlan], cheaper: str | None, qps: float, headroom: float, slo_p99_ms: float,
               target: float) -> list[str]:
    """The plan in sentences, one per device, then the verdict: `qps` plus `headroom` (a fraction) is the `target`
    load in req/s, to be served at a p99 within `slo_p99_ms`."""
    head = (f"{qps:,.0f} req/s + {headroom:.0%} headroom = {target:,.0f} req/s at p99 ≤ "
            f"{slo_p99_ms:g} ms")
    lines = [head]
    for d, p in devices.items():
        label = DEVICE_LABEL[d]
        cp = p.capacity_point
        if not p.meets_slo or cp is None or p.servers is None:
            lines.append(f"{label}: cannot meet p99 ≤ {slo_p99_ms:g} ms at any measured load "
                         f"(lowest measured p99: {u.ms(p.min_p99_ms)}).")
            continue
        unit = "server" if d == "cpu" else "GPU"
        what = (f"{p.servers} {unit}{'s' if p.servers > 1 else ''}"
                + (f" ({p.units} logical CPUs)" if d == "cpu" and p.units else ""))
        cost = f"{u.cents(p.usd_per_hour)}/h" if p.usd_per_hour is not None else "no price"
        at = "Poisson arrivals" if cp.kind == SERVER else users(cp.users)
        line = (f"{label}: one {unit} sustains {p.capacity_req_s:,.0f} req/s within the SLO (p99 "
                f"{u.ms(cp.p99_ms)} at {at}, {cp.kind}); {what}, {cost}.")
        if p.capacity_valid is False:
            line += f" INVALID figure: {'; '.join(p.capacity_reasons or [])}."
        if p.capacity_lower_bound:
            line += (f" A lower bound: the heaviest load offered still met the SLO and still gained throughput, "
                     f"so one {unit} may sustain more and fewer {unit}s may do.")
        if p.extrapolated:
            line += (f" Extrapolated: the target is {p.extrapolation_factor:,.1f}x what one {unit} was measured "
                     f"to sustain; {p.servers} {unit}s assume capacity adds up linearly (not measured).")
        lines.append(line)
        cb = p.client_batched
        if cb:
            lines.append(f"{label}, if clients send {cb.batch_size} rows per request: one {unit} carries "
                         f"{cb.capacity_inferences_s:,.0f} inferences/s within the SLO (p99 {u.ms(cb.p99_ms)} "
                         f"at {users(cb.users)}); {cb.servers} {unit}{'s' if cb.servers > 1 else ''}, "
                         f"{u.cents(cb.usd_per_hour or 0)}/h" + (" (extrapolated, linear scaling)" if cb.extrapolated
                                                             else "") + ".")
    if cheaper:
        other = [d for d in devices if d != cheaper and devices[d].usd_per_hour is not None]
        vs = "".join(f" vs {u.cents(devices[d].usd_per_hour)}/h on the {DEVICE_LABEL[d]}" for d in other)
        lines.append(f"Cheaper: the {DEVICE_LABEL[cheaper]}, {u.cents(devices[cheaper].usd_per_hour)}/h{vs} "
                     "(hardware prices; energy not included).")
    elif devices:
        lines.append(f"No measured server meets p99 ≤ {slo_p99_ms:g} ms: no plan.")
    else:
        lines.append("No served load was measured in this run: no plan.")
    return lines


def users(n: int | None) -> str:
    return "? users" if n is None else f"{n} user" + ("" if n == 1 else "s")
