"""Every sentence the report states about a model, built from its typed sections (report/sections.py).

Only what was measured is stated; a side that was not measured is said to be so. analysis.py keeps
the conclusions and the headline in the Report (summary.json's "conclusions" and "headline"); the
renderers show them. The cost and plan lines are still written beside their figures (cost_render.py,
breakeven.py, plan.py).
"""

from __future__ import annotations

from trainserve.core.speedup import DEVICE_LABEL
from trainserve.report import units as u
from trainserve.report.sections import (
    AttributionPoint,
    HeadlineConclusion,
    HeadlineSpeedup,
    MemoryCompare,
    MemoryFigure,
    ModelSection,
    ServerVsLimit,
    TrainSpeedup,
)


def conclusions(s: ModelSection) -> list[str]:
    """A model's conclusions, in the order the Summary lists them."""
    return (speedup_sentences(s) + _not_measured(s) + _train_vs_infer(s) + memory(s.model, s.memory_compare)
            + _sweeps(s) + _max_batch(s) + limits(s) + _mfu(s) + server_adds(s) + capacities(s))


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

def _train_vs_infer(s: ModelSection) -> list[str]:
    out = []
    for d, tv in s.train_vs_infer.items():
        if tv.throughput_ratio is not None:
            out.append(f"{s.model} {_where(d)}: serving at saturation handles {u.num(tv.infer_throughput_samples_s)} "
                       f"samples/s, {u.ratio(tv.throughput_ratio)} the training throughput of "
                       f"{u.num(tv.train_throughput_samples_s)} samples/s.")
        if tv.energy_ratio is not None:
            out.append(f"{s.model} {_where(d)}: a training sample costs {u.joules(tv.train_energy_per_sample_j)}, "
                       f"an inference sample {u.joules(tv.infer_energy_per_sample_j)} ({_less(tv.energy_ratio)}).")
    return out


def _less(ratio: float) -> str:
    """Training's figure over inference's, in words."""
    if ratio >= 1.15:
        return f"{u.ratio(ratio)} less than training"
    if ratio > 1 / 1.15:
        return "about the same as training"
    return f"{u.ratio(1 / ratio)} more than training"


def memory(name: str, compare: dict[str, MemoryCompare]) -> list[str]:
    """One sentence per device and kind of memory figure that has both sides (report/memory_compare.py)."""
    out = []
    for d, c in compare.items():
        for kind, label in (("working_set", "working set"), ("process_total", "process total")):
            t, i, r = getattr(c.train, kind), getattr(c.infer, kind), getattr(c.ratios, kind)
            if r is None:
                continue
            at = f" at batch {t.batch_size}" if kind == "working_set" else ""
            out.append(f"{name} {_where(d)}, {label}{at}: training {u.nbytes(t.bytes)}{_shares(t)}, inference "
                       f"{u.nbytes(i.bytes)} ({u.ratio(r)} as much for training).")
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


# --- served beside the in-process limit (report/limits.py) ---------------------------------------

def in_process_batch1(s: ModelSection) -> str:
    """The in-process twin of the served batch-1 ratio: ", 3.1x in process (p50 0.10 ms vs 0.31 ms)"."""
    value = s.limit_speedups.infer_batch1
    if value is None:
        return ""
    cpu, gpu = s.limits["cpu"].batch1_p50_ms, s.limits["cuda"].batch1_p50_ms
    return f", {u.ratio(value)} in process (p50 {u.ms(gpu)} vs {u.ms(cpu)})"


def limits(s: ModelSection) -> list[str]:
    """One sentence per device: what the server adds at batch 1, and the share of the in-process peak it reaches."""
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
        out.append(f"{s.model} on the {DEVICE_LABEL[d]}: {b1}; {peak}.")
    return out


# --- where the served time goes (report/attribution.py) ------------------------------------------

def bound(p: AttributionPoint) -> str:
    """"GPU · batch 1 · 16 users: 5,012 req/s — bounded by the GPU: busy, ..."."""
    what = f"{u.num(p.requests_s)} req/s" if p.requests_s is not None else "no throughput"
    if not p.bound:
        return f"{p.label}: {what} — bound not measured (a record from before attribution)."
    return f"{p.label}: {what} — bounded by {p.bound['detail']}."


def capacities(s: ModelSection) -> list[str]:
    """One sentence per ramp: its capacity within the SLO and what bounded it."""
    out = []
    for c in s.capacity_bounds:
        b = c.bound or {}
        where = f"{s.model} on the {DEVICE_LABEL[c.device]}"
        if c.requests_s is None:
            out.append(f"{where}: no ramp step met the SLO; {b.get('detail', 'bound not measured')}.")
            continue
        slo = f" (p99 ≤ {c.slo_p99_ms:g} ms)" if c.slo_p99_ms else ""
        out.append(f"{where}: capacity within the SLO{slo} is {u.num(c.requests_s)} req/s at {c.users} users, "
                   f"bounded by {b.get('detail', 'a limit not measured')}.")
    return out


def server_adds(s: ModelSection) -> list[str]:
    """Per device, from its lightest plain load point: what the server adds, by its own statistics (never the
    client's latency minus an in-process one)."""
    out = []
    for d in ("cpu", "cuda"):
        mine = [(p, p.attribution) for p in s.attribution if p.device == d and p.attribution
                and p.attribution.server_ms is not None and "(ramp)" not in p.label]
        if not mine:
            continue
        p, a = min(mine, key=lambda pa: (pa[0].batch_size, pa[1].latency_ms))
        client = f"the client's own time {u.ms(a.client)}, " if a.client is not None else ""
        out.append(f"{s.model} on the {DEVICE_LABEL[d]} ({p.label}): the server adds {u.ms(a.server_ms)} "
                   f"by its own statistics (queue {u.ms(a.queue)}, compute {u.ms(a.compute)}, front end "
                   f"{u.ms(a.frontend)}); of the client's mean latency {u.ms(a.latency_ms)}, {client}"
                   f"network and the rest {u.ms(a.network)}."
                   + ("" if a.consistent else f" Inconsistent: {a.note}."))
    return out
