"""Line a run's records up: per model, training beside inference, CPU beside GPU, and what follows.

The result is one typed Report (report/common/sections.py), read by the renderers and written as
summary.json, so every number the HTML and Markdown show is also in summary.json. A side that was
not measured is None there and "not measured" in prose; nothing is guessed.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
from typing import Any

from trainserve.core import bounds
from trainserve.core.profile import ProfileRecord
from trainserve.core.servedparts import LoadParts, RampStep
from trainserve.core.speedup import (
    DEVICE_LABEL,
    DEVICES,
    operating_points,
    pick_train,
    speedups_of_records,
)
from trainserve.core.speedup import ratio as _div
from trainserve.report.answers.answers import answers
from trainserve.report.common import units as u
from trainserve.report.common.collect import Collection, Entry
from trainserve.report.common.energy import NO_ENERGY, own_energy
from trainserve.report.common.sections import (
    Column,
    ColumnMemory,
    InferSpeedup,
    Machine,
    MaxBatch,
    ModelSection,
    Notice,
    OperatingPoint,
    Ramp,
    RecordRow,
    Report,
    Served,
    Speedups,
    Sweep,
    TimeToAccuracyRow,
    TrainSpeedup,
    TrainVsInfer,
    Verdict,
)
from trainserve.report.common.sentences import conclusions, headline
from trainserve.report.memory.memory_compare import memory_compare
from trainserve.report.serving.attribution_section import attribution_section, bound_of
from trainserve.report.serving.batching import batching_section, data_path_section, set_aside
from trainserve.report.serving.limits_section import is_limit, limits_section
from trainserve.report.serving.scenarios import scenarios_section
from trainserve.report.verdict import invariants
from trainserve.report.verdict import withheld
from trainserve.report.verdict.verdict import screen_headline, verdict

SUMMARY_SCHEMA_VERSION = 1
# Which inference backend the headline speedups use when several were measured on both devices.
BACKEND_PREFERENCE = ("onnxruntime", "triton", "torch")


def model_key(record: ProfileRecord) -> str:
    """Served names carry the device ("cnn_cpu", "cnn_gpu"); the report groups by the model itself."""
    return bounds.model_key(record.model)


def analyse(collection: Collection) -> Report:
    screened = withheld.screened(collection)  # figures beyond a physical bound become errors
    # a model served with batching off on purpose, and both variants at one shared rate, stand only in the batching
    # comparison (report/serving/batching.py)
    entries = [e for e in screened if not set_aside(e.record)]
    models: dict[str, ModelSection] = {}
    scenarios = scenarios_section(entries, model_key)  # SingleStream / Server / Offline, with their verdicts
    for name in sorted({model_key(e.record) for e in entries}):
        mine = [e for e in entries if model_key(e.record) == name]
        models[name] = _model_section(name, mine)
        # an ONNX file trained elsewhere (trainserve run --onnx): its training columns say so, not "not measured"
        models[name].trained_here = (collection.card or {}).get("family") != "onnx"
        models[name].scenarios = scenarios.models.get(name, {})  # the plan and cost read the Server figure
        models[name].batching = batching_section([e for e in screened if model_key(e.record) == name])
        models[name].data_path = data_path_section(mine)
    judged = Verdict(**verdict(entries, withheld.summary_errors(entries), invariants.reasons(entries, models)))
    for m in models.values():  # a conclusion resting on an INVALID record says so (the headline is screened below)
        m.conclusions = conclusions(m, judged.invalid_sources)
    all_conclusions = [c for m in models.values() for c in m.conclusions]
    errors = [Notice(**e) for e in withheld.summary_errors(entries)]
    report = Report(
        schema_version=SUMMARY_SCHEMA_VERSION,
        run=collection.run,
        generated=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        machines=_machines(entries),
        versions=_versions(entries),
        card=_card_summary(collection.card),
        models=models,
        conclusions=all_conclusions,
        headline=headline(models),
        errors=errors,
        warnings=_warnings(screened) + [Notice(rel, None, None, None, why) for rel, why in collection.problems],
        records=[_record_row(e) for e in screened],
        verdict=judged,
        scenarios=scenarios,
    )
    screen_headline(report)  # the headline states only valid figures
    report.answers = answers(report)
    return report


# --- one column of a table: a record (or one point of its load ramp) seen through the report ---

def view(e: Entry, scenario: str, point: RampStep | None = None) -> Column:
    r = e.record
    lat = dataclasses.asdict(r.speed.latency)
    throughput, requests_s, concurrency = r.speed.throughput_samples_s, r.speed.requests_s, r.concurrency
    if point is not None:  # a step has no max_ms: its column leaves it out
        lat = {k: getattr(point, k, None) for k in ("p50_ms", "p90_ms", "p95_ms", "p99_ms", "p999_ms", "mean_ms",
                                                     "max_ms")}
        throughput, requests_s = point.throughput_samples_s, point.requests_s
        concurrency = point.users if point.users is not None else concurrency
    m = r.memory
    # a ramp step's share of the ramp's energy is not known: the record's energy covers every step
    energy = own_energy(r) if point is None else NO_ENERGY
    cpu = r.device == "cpu"  # a CPU column takes no GPU reading (older records carried the host GPU's)
    return Column(
        source=e.source,
        scenario=scenario,
        phase=r.phase,
        device=r.device,
        device_name=r.device_name,
        backend=r.backend,
        target=r.target,
        precision=r.precision,
        math_mode=r.settings.get("math_mode"),
        batch_size=r.batch_size,
        concurrency=concurrency,
        ramp_point=point is not None,
        throughput_samples_s=throughput,
        requests_s=requests_s,
        latency=lat,
        memory=ColumnMemory(
            peak_bytes=_first(m.peak_bytes, m.cuda_allocated_peak_bytes, m.rss_peak_bytes),
            weights_bytes=m.weights_bytes,
            gradients_bytes=m.gradients_bytes,
            optimizer_bytes=m.optimizer_bytes,
            activations_bytes=m.activations_bytes,
            cuda_reserved_peak_bytes=m.cuda_reserved_peak_bytes,
            rss_peak_bytes=m.rss_peak_bytes,
            gpu_mem_used_max_bytes=None if cpu else r.utilization.gpu_mem_used_max_bytes,
            **_gpu_release(r),
        ),
        gpu_util_mean_percent=None if cpu else r.utilization.gpu_util_mean_percent,
        cpu_process_mean_percent=r.utilization.cpu_process_mean_percent,
        cpu_system_mean_percent=r.utilization.cpu_system_mean_percent,
        mean_power_w=energy.mean_power_w,
        energy_j=energy.energy_j,
        energy_per_sample_j=energy.energy_per_sample_j,
        energy_source=r.energy.source,
        energy_meter=energy.meter,
        energy_status=energy.status,
        host_logical_cpus=(r.host or {}).get("logical_cpus"),
        torch_threads=r.settings.get("torch_threads"),
        world_size=r.settings.get("world_size"),
        epochs=r.settings.get("epochs"),
        flops_per_sample=r.speed.flops_per_sample,
        achieved_tflops=r.speed.achieved_tflops,
        mfu=r.speed.mfu,
        peak_tflops=r.speed.peak_tflops,
        partial=r.validity.partial,
        errors=bounds.errors_of(r) if point is None else withheld.held_out(point),
        warnings=list(r.validity.warnings),
        bound=bound_of(r, point),
    )


def _gpu_release(r: ProfileRecord) -> dict[str, Any]:
    """A CUDA training record's NVML reading before training and what it still held once freed (train/release.py)."""
    if r.phase != "train" or r.device != "cuda":
        return {}
    info = r.extra.get("gpu_release") if isinstance(r.extra.get("gpu_release"), dict) else {}
    return {"gpu_used_before_bytes": info.get("nvml_used_before_bytes"), "gpu_held_after_bytes": r.memory.gpu_held_bytes,
            "gpu_released": r.memory.gpu_released, "gpu_used_after_exit_bytes": info.get("nvml_used_after_exit_bytes")}


def _first(*values: Any) -> Any:
    return next((v for v in values if v is not None), None)


# --- per model ------------------------------------------------------------------------------

def _model_section(name: str, entries: list[Entry]) -> ModelSection:
    train = {d: _pick_train([e for e in entries if e.record.phase == "train" and e.record.device == d])
             for d in DEVICES}
    # in-process limits (trainserve limits) are no served measurement: limits_section sets them beside the served ones
    infer_entries = [e for e in entries if e.record.phase == "infer" and not is_limit(e.record)]
    backends = sorted({e.record.backend for e in infer_entries}, key=_backend_rank)
    infer: dict[str, dict[str, Served | None]] = {}
    for b in backends:
        infer[b] = {}
        for d in DEVICES:
            mine = [e for e in infer_entries if e.record.backend == b and e.record.device == d]
            infer[b][d] = _infer_views(mine) if mine else None
    train_pairs = [(e.source, e.record) for e in entries if e.record.phase == "train"]
    trained = speedups_of_records(train_pairs)  # the same function `trainserve compare` prints from
    b1, sat = _speedups(infer)
    section = ModelSection(
        model=name,
        train=train,
        infer=infer,
        speedups=Speedups(train=TrainSpeedup.of(trained["train"]), infer_batch1=b1, infer_saturated=sat,
                          infer_backend=_infer_backend(infer), train_best=TrainSpeedup.of(trained["train_best"])),
        operating_points={d: Sweep(train=[OperatingPoint(**p) for p in op["train"]],
                                   train_best=op["train_best"] and OperatingPoint(**op["train_best"]))
                          for d, op in operating_points(train_pairs).items()},
        train_vs_infer=_train_vs_infer(train, infer),
        max_batch=_max_batch(entries),
        time_to_accuracy=time_to_accuracy(entries, infer),
        ramps=_ramps(infer_entries),
        memory_compare={},  # set below, from the sections above
        devices_measured=sorted({e.record.device for e in entries}, key=DEVICES.index),
    )
    lims = limits_section(entries, section)
    section.limits, section.server_vs_limit = lims.limits, lims.server_vs_limit
    section.limit_points, section.limit_speedups = lims.limit_points, lims.limit_speedups
    section.memory_compare = memory_compare(entries, section)
    section.attribution, section.capacity_bounds = attribution_section(infer_entries)  # report/serving/attribution_section.py
    return section


def _backend_rank(b: str) -> tuple[int, str]:
    return (BACKEND_PREFERENCE.index(b) if b in BACKEND_PREFERENCE else len(BACKEND_PREFERENCE), b)


def _pick_train(entries: list[Entry]) -> Column | None:
    """The view of the record trainserve.core.speedup.pick_train picks for the device."""
    picked = pick_train([(e.source, e.record) for e in entries])
    return None if picked is None else view(Entry(*picked), "train")


def _infer_views(entries: list[Entry]) -> Served:
    """Batch 1 (latency at one request in flight) and saturated (the most samples/s seen)."""
    batch1 = None
    # a ramp's overall latency mixes every step, so only plain measurements count as batch 1
    singles = [e for e in entries if e.record.batch_size == 1 and (e.record.concurrency or 1) == 1 and not _ramp(e)]
    if singles:
        batch1 = view(min(singles, key=lambda e: _p50(e) if _p50(e) is not None else float("inf")), "batch1")
    else:
        for e in entries:
            first = [p for p in _ramp(e) if p.users == 1 and p.rate is None]
            if e.record.batch_size == 1 and first:
                batch1 = view(e, "batch1", first[0])
                break
    candidates: list[tuple[float, Entry, RampStep | None]] = []
    for e in entries:
        best = withheld.ranking_throughput(e.record)  # a withheld best is still picked, to show its error
        if best is not None:
            candidates.append((best, e, None))
        for p in _ramp(e):
            if p.throughput_samples_s is not None:
                candidates.append((p.throughput_samples_s, e, p))
    saturated = None
    if candidates:
        _, e, p = max(candidates, key=lambda c: c[0])
        saturated = view(e, "saturated", p)
    return Served(batch1=batch1, saturated=saturated)


def _p50(e: Entry) -> float | None:
    return e.record.speed.latency.p50_ms


def _ramp(e: Entry) -> list[RampStep]:
    return LoadParts.of(e.record).ramp if e.record.phase == "infer" else []



def _speedup(kind: str, cpu: Column | None, gpu: Column | None, metric: str) -> InferSpeedup:
    """GPU over CPU; for latency the CPU's time over the GPU's (how many times faster it answers)."""
    get = (lambda v: v.p50_ms) if metric == "p50_ms" else (lambda v: getattr(v, metric))
    c = get(cpu) if cpu else None
    g = get(gpu) if gpu else None
    value = _div(c, g) if metric == "p50_ms" else _div(g, c)
    missing = [DEVICE_LABEL[d] for d, v in (("cpu", c), ("cuda", g)) if v is None]
    note = None if value is not None else f"not measured: no {' or '.join(missing)} {kind} measurement"
    error = withheld.metric_error(cpu, metric) or withheld.metric_error(gpu, metric)
    if value is None and error:
        note = f"withheld: {error}"
    return InferSpeedup(value=value, cpu=c, gpu=g, metric=metric, note=note, error=error)


def _infer_backend(infer: dict[str, dict[str, Served | None]]) -> str | None:
    """The backend the inference speedups use: the first measured on both devices, else the first."""
    return next((b for b in infer if infer[b]["cpu"] and infer[b]["cuda"]), next(iter(infer), None))


def _speedups(infer: dict[str, dict[str, Served | None]]) -> tuple[InferSpeedup, InferSpeedup]:
    """The inference speedups (batch 1, saturated); the training ones come from trainserve.core.speedup."""
    backend = _infer_backend(infer)
    cpu = infer[backend]["cpu"] if backend else None
    gpu = infer[backend]["cuda"] if backend else None
    return (_speedup("batch-1 inference", cpu and cpu.batch1, gpu and gpu.batch1, "p50_ms"),
            _speedup("saturated inference", cpu and cpu.saturated, gpu and gpu.saturated, "throughput_samples_s"))


def _train_vs_infer(train: dict[str, Column | None],
                    infer: dict[str, dict[str, Served | None]]) -> dict[str, TrainVsInfer]:
    out = {}
    for d in DEVICES:
        t = train[d]
        i = next((per[d].saturated for per in infer.values() if per[d] and per[d].saturated), None)
        if t is None and i is None:
            continue
        t_tp, i_tp = t and t.throughput_samples_s, i and i.throughput_samples_s
        t_e, i_e = t and t.energy_per_sample_j, i and i.energy_per_sample_j
        estimated = any(c is not None and c.energy_status == "estimated" for c in (t, i))
        out[d] = TrainVsInfer(train_throughput_samples_s=t_tp, infer_throughput_samples_s=i_tp,
                              throughput_ratio=_div(i_tp, t_tp), train_energy_per_sample_j=t_e,
                              infer_energy_per_sample_j=i_e, energy_ratio=_div(t_e, i_e),
                              energy_estimated=estimated)
    return out


def time_to_accuracy(entries: list[Entry], infer: dict[str, dict[str, Served | None]]) -> dict[str, TimeToAccuracyRow]:
    """Per device, the training run made with --target-accuracy (compare/ first, else the newest), beside
    the batch-1 latency and energy per inference of the served model on that device when measured."""
    out: dict[str, TimeToAccuracyRow] = {}
    for d in DEVICES:
        picked = pick_train([(e.source, e.record) for e in entries if e.record.phase == "train"
                             and e.record.device == d and e.record.time_to_accuracy is not None])
        if picked is None:
            continue
        source, r = picked
        backend = next((b for b in infer if infer[b][d]), None)
        served = (infer[backend][d] if backend else None) or Served(None, None)
        b1, sat = served.batch1, served.saturated
        out[d] = TimeToAccuracyRow(
            **dataclasses.asdict(r.time_to_accuracy), source=source, batch_size=r.batch_size,
            precision=r.precision, infer_backend=backend, infer_batch1_p50_ms=b1.p50_ms if b1 else None,
            infer_energy_per_sample_j=sat.energy_per_sample_j if sat else None,
            seeds=r.extra.get("time_to_accuracy_seeds") if isinstance(r.extra, dict) else None)
    return out


def _max_batch(entries: list[Entry]) -> dict[str, MaxBatch]:
    out: dict[str, MaxBatch] = {}
    for e in sorted(entries, key=lambda e: e.record.created):
        mb = e.record.memory.max_batch
        if not isinstance(mb, dict) or not (mb.get("train") or mb.get("infer")):
            continue
        t, i = mb.get("train"), mb.get("infer")
        out[e.record.device] = MaxBatch(train=t, infer=i, ratio=mb.get("ratio") or _div(i, t),
                                        precision=e.record.precision, source=e.source)
    return out


def _ramps(entries: list[Entry]) -> list[Ramp]:
    out = []
    for e in entries:
        points = [p for p in _ramp(e) if p.throughput_samples_s is not None]
        if points:
            r = e.record
            frontends = LoadParts.of(r).server.frontends
            shown = f" · {frontends} front-end processes" if isinstance(frontends, int) and frontends > 1 else ""
            out.append(Ramp(label=f"{DEVICE_LABEL[r.device]} · {r.backend} · batch {r.batch_size}{shown}",
                            device=r.device, backend=r.backend, batch_size=r.batch_size, source=e.source,
                            points=points))
    return out


# --- run-wide -------------------------------------------------------------------------------

def _warnings(entries: list[Entry]) -> list[Notice]:
    out = []
    for e in entries:
        r = e.record
        messages = list(r.validity.warnings)
        if r.validity.partial:
            messages.append("partial: the measurement stopped early; numbers cover what finished")
        if r.memory.gpu_released is False:
            messages.append(f"GPU memory not released after the run ({u.nbytes(r.memory.gpu_held_bytes)} still held)")
        seen = set()
        for msg in messages:
            if msg not in seen:
                seen.add(msg)
                out.append(Notice(source=e.source, model=model_key(r), device=r.device, phase=r.phase, message=msg))
    return out


def _machines(entries: list[Entry]) -> list[Machine]:
    hosts: dict[str, Machine] = {}
    for e in entries:
        h = e.record.host or {}
        key = str(h.get("hostname") or "unknown host")
        m = hosts.setdefault(key, Machine(hostname=key, cpu_model=h.get("cpu_model"),
                                          logical_cpus=h.get("logical_cpus"), memory_bytes=h.get("memory_bytes"),
                                          platform=h.get("platform"), python=h.get("python"), gpus=[]))
        if e.record.device == "cuda" and e.record.device_name and e.record.device_name not in m.gpus:
            m.gpus.append(e.record.device_name)
    return list(hosts.values())


def _versions(entries: list[Entry]) -> dict[str, str]:
    seen: dict[str, list[str]] = {}
    for e in entries:
        for k, v in (e.record.versions or {}).items():
            if str(v) not in seen.setdefault(k, []):
                seen[k].append(str(v))
    return {k: " / ".join(v) for k, v in sorted(seen.items())}


def _card_summary(card: dict[str, Any] | None) -> dict[str, Any] | None:
    if not card:
        return None
    out = {k: card.get(k) for k in ("family", "preset", "parameters", "dataset", "precision", "metrics")}
    data = card.get("data")
    out["train_samples"] = data.get("samples") if isinstance(data, dict) else None  # rows per epoch
    config = card.get("config") or {}
    if card.get("family") in ("user", "onnx"):  # which model was measured: the file and its hash
        out |= {"name": config.get("name"), "reference": config.get("reference") or config.get("file"),
                "sha256": config.get("sha256")}
    return out


def _record_row(e: Entry) -> RecordRow:
    r = e.record
    return RecordRow(source=e.source, phase=r.phase, model=r.model, device=r.device, backend=r.backend,
                     precision=r.precision, batch_size=r.batch_size, concurrency=r.concurrency,
                     throughput_samples_s=r.speed.throughput_samples_s, p50_ms=r.speed.latency.p50_ms,
                     p99_ms=r.speed.latency.p99_ms, peak_bytes=_first(r.memory.peak_bytes, r.memory.rss_peak_bytes),
                     partial=r.validity.partial, created=r.created, errors=bounds.errors_of(r))


def columns(section: ModelSection) -> list[tuple[str, Column | None]]:
    """The side-by-side columns of a model's table, CPU beside GPU for each kind of measurement.

    Devices with no record at all for this model get no column; a device that was measured for
    one phase but not the other gets a column of "not measured" (None).
    """
    devices = section.devices_measured
    cols: list[tuple[str, Column | None]] = []
    for d in devices:
        cols.append((f"Train · {DEVICE_LABEL[d]}", section.train[d]))
    several = len(section.infer) > 1
    for b, per_device in section.infer.items():
        for kind, title in (("batch1", "Infer batch 1"), ("saturated", "Infer saturated")):
            for d in devices:
                served = per_device[d]
                v = getattr(served, kind) if served else None
                cols.append((f"{title} · {DEVICE_LABEL[d]}" + (f" · {b}" if several else ""), v))
    if not section.infer:
        cols += [(f"Infer · {DEVICE_LABEL[d]}", None) for d in devices]
    return cols
