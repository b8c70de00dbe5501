"""The questions the README promises to answer, each answered in the report from its typed sections.

`QUESTIONS` is the one list: README.md's bullet list (between its `answers` markers) is generated from
it (`python -m trainserve.answersdoc --write`, trainserve/answersdoc.py; tests/test_readme.py fails when they differ),
and `answers(report)` gives the report's "Answers" section, one entry per question: a sentence with its
figure and the anchor of the table it comes from, or "not measured in this run: <why>" and the command
that measures it. This module writes the answers' prose; the conclusions' is in report/common/sentences.py.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from trainserve.core.bounds import NOBATCH_SUFFIX
from trainserve.core.speedup import DEVICE_LABEL
from trainserve.report.common import units as u
from trainserve.report.common.sections import (
    Answer,
    BatchingCompare,
    DataPath,
    DataPathPoint,
    InferSpeedup,
    ModelSection,
    Report,
    TrainSpeedup,
)

INPUT_BOUND_SHARE = 0.20  # a data-wait share of step time above this is "input-bound" (train/record.py's warning)
# host-fed samples/s below this share of the resident data's: the data path limits training. The verdict rests on
# this ratio alone: on a GPU the host's wait for a batch also absorbs compute queued ahead (a copy or an index
# transfer that synchronises), so a large wait share with a ratio near 1 costs the GPU nothing
DATA_PATH_LIMIT = 0.90
WAIT_EXPLAINS = 0.5  # ... when the longer wait for batches covers at least this share of the longer step
GPU_DATA_PATH_COMMAND = "trainserve compare --sweep --device cuda"


@dataclass(frozen=True)
class Found:
    """A question's answer for one model: the sentence, or why it was not measured (text None)."""

    text: str | None
    why: str = ""  # when text is None


@dataclass(frozen=True)
class Question:
    """One README promise: its wording, how the report answers it, and what measures it when it did not."""

    id: str
    readme: str  # the README's bullet, as the user reads it
    link: str  # the report's anchor the figure comes from; "{m}" is the model's name
    command: str  # what measures it, shown when this run did not
    answer: Callable[[ModelSection], Found]


# --- the answers ---------------------------------------------------------------------------------

def _train_speedup(m: ModelSection) -> Found:
    same, best = m.speedups.train, m.speedups.train_best
    if same.value is None and best.value is None:
        return Found(None, "no GPU training was measured (this host has no CUDA GPU, or --device cpu)")
    parts = [f"{_times(sp)} ({u.num(sp.gpu)} vs {u.num(sp.cpu)} samples/s, {what})"
             for sp, what in ((same, "same batch and precision"), (best, "each at its best"))
             if sp.value is not None]
    return Found("The GPU trains " + "; ".join(parts) + " faster than the CPU.")


def _infer_speedup(m: ModelSection) -> Found:
    b1, sat = m.speedups.infer_batch1, m.speedups.infer_saturated
    if b1.value is None and sat.value is None:
        return Found(None, "no GPU server was measured (this host has no CUDA GPU, or --device cpu)")
    parts = []
    if b1.value is not None:
        parts.append(f"{_times(b1)} as fast at batch 1 (p50 {u.ms(b1.gpu)} vs {u.ms(b1.cpu)} on the CPU)")
    if sat.value is not None:
        parts.append(f"{_times(sat)} the samples/s saturated ({u.num(sat.gpu)} vs {u.num(sat.cpu)})")
    return Found("The GPU answers " + " and ".join(parts) + ".")


def _memory(m: ModelSection, side: str) -> Found:
    texts = []
    for d in m.devices_measured:
        mc = m.memory_compare.get(d)
        s = None if mc is None else mc.train if side == "train" else mc.infer
        fig = s and (s.working_set or s.process_total)
        if fig is None:  # no like-for-like figure: the column's own peak, as the table shows it
            served = m.served(d)
            col = m.train.get(d) if side == "train" else served and served.saturated
            if col is not None and col.memory.peak_bytes is not None:
                texts.append(f"{DEVICE_LABEL[d]}: {u.nbytes(col.memory.peak_bytes)} peak at batch {col.batch_size}")
            continue
        kind = "working set" if fig is s.working_set else "process total"
        parts = ""
        if fig.parts:
            named = {"weights": "weights", "gradients": "gradients", "optimizer": "optimizer state",
                     "activations": "activations"}
            parts = " (" + ", ".join(f"{label} {u.nbytes(fig.parts.get(k))}" for k, label in named.items()
                                     if fig.parts.get(k) is not None) + ")"
        batch = f" at batch {fig.batch_size}" if fig.batch_size else ""
        texts.append(f"{DEVICE_LABEL[d]}: {u.nbytes(fig.bytes)} {kind}{batch}{parts}")
    if not texts:
        what = "training" if side == "train" else "inference"
        return Found(None, f"no {what} record measured memory")
    return Found(("Training takes " if side == "train" else "Inference takes ") + "; ".join(texts) + ".")


def _max_batch(m: ModelSection) -> Found:
    if not m.max_batch:
        return Found(None, "the largest batch is searched on a GPU only (a CPU process is killed, not told, "
                           "when it runs out of memory)")
    return Found("; ".join(f"{DEVICE_LABEL[d]} ({v.precision}): training fits batch {u.num(v.train)}, inference "
                           f"batch {u.num(v.infer)} ({u.ratio(v.ratio)})" for d, v in m.max_batch.items()) + ".")


def _batch_precision(m: ModelSection) -> Found:
    texts = []
    for d, sw in m.operating_points.items():
        best = sw.train_best
        if best is None or not sw.train:
            continue
        first = min(sw.train, key=lambda p: (p.batch_size, p.precision != "fp32"))
        gain = (best.throughput_samples_s / first.throughput_samples_s
                if best.throughput_samples_s and first.throughput_samples_s else None)
        precisions = sorted({p.precision for p in sw.train})
        texts.append(f"{DEVICE_LABEL[d]}: best at batch {best.batch_size} {best.precision} "
                     f"({u.num(best.throughput_samples_s)} samples/s, {u.ratio(gain)} batch {first.batch_size} "
                     f"{first.precision}; {len(sw.train)} points over {', '.join(precisions)})")
    if not texts:
        return Found(None, "the training sweep did not run (--no-sweep)")
    return Found("; ".join(texts) + ".")


def _data_path(m: ModelSection) -> Found:
    texts = []
    for d in sorted(m.data_path, key=lambda d: d != "cuda"):  # the GPU's answer first: the question is about it
        dp = m.data_path[d]
        by = {p.placement: p for p in dp.points if p.compared}
        if "host" in by and "device" in by:
            texts.append(_compared(d, by["host"], by["device"], dp.host_over_device))
        elif dp.points:
            texts.append(_placements(d, dp))
        if dp.skipped:
            texts.append(f"{DEVICE_LABEL[d]} host-vs-device comparison: not measured in this run: {dp.skipped}")
    if not texts:
        return Found(None, "neither the training sweep nor a training record measured where its data lived")
    if "cuda" not in m.data_path:
        texts.append(f"GPU: not measured in this run: no GPU in this run; `{GPU_DATA_PATH_COMMAND}` on a machine "
                     "with an NVIDIA GPU measures it")
    return Found("; ".join(texts) + ".")


def _compared(d: str, host: DataPathPoint, dev: DataPathPoint, r: float | None) -> str:
    """The sweep's comparison: "does the data path limit training here", with both figures and their ratio."""
    workers = "" if host.workers is None else f", {host.workers} worker{'s' if host.workers != 1 else ''}"
    feed = ("pinned memory, non_blocking copies" if d == "cuda" else "no copy: the host is the device") + workers
    where = "resident on the GPU" if d == "cuda" else "as pre-materialised tensors"
    wait = "" if host.host_data_ms is None else (f", {u.ms(host.host_data_ms)} of host data time per step "
                                                 f"({_share(host.data_wait_share)} of step time)")
    return (f"{DEVICE_LABEL[d]}, at the sweep's best batch ({host.batch_size}, {host.precision}): the host DataLoader "
            f"({feed}) feeds {u.num(host.throughput_samples_s)} samples/s{wait}, the data {where} "
            f"{u.num(dev.throughput_samples_s)} samples/s — host at {u.ratio(r)} of device: {_verdict(host, dev, r)}")


def _verdict(host: DataPathPoint, dev: DataPathPoint, r: float | None) -> str:
    """Whether the data path limits training: host-fed samples/s below DATA_PATH_LIMIT of resident, with the extra
    time getting batches covering at least half the extra step time (a slower host side that did not wait longer
    for its batches was slowed by something else: other work on the host's cores)."""
    if r is None:
        return "the data path was not compared"
    if r >= DATA_PATH_LIMIT:
        return "the data path does not limit training"
    cost = f"it costs {100 * (1 - r):.0f}% of the samples/s"
    steps = [p.batch_size / p.throughput_samples_s * 1e3 if p.throughput_samples_s else None for p in (host, dev)]
    if None in steps or host.host_data_ms is None or dev.host_data_ms is None:
        return f"the data path limits training ({cost})"
    step_gap, wait_gap = steps[0] - steps[1], host.host_data_ms - dev.host_data_ms
    if wait_gap >= WAIT_EXPLAINS * step_gap:
        return f"the data path limits training ({cost}; its steps waited {u.ms(wait_gap)} longer for their batches)"
    return (f"not the data path, though: the host-fed steps took {u.ms(step_gap)} longer but waited only "
            f"{u.ms(wait_gap)} longer for their batches, so other work on the host slowed them; rerun to confirm")


def _placements(d: str, dp: DataPath) -> str:
    """Training records' own placements, when the sweep did not compare the two."""
    shares = [f"{p.placement} placement at batch {p.batch_size}: {u.num(p.throughput_samples_s)} samples/s, "
              f"{_share(p.data_wait_share)} of step time waiting for data" for p in dp.points]
    waits = [p.data_wait_share for p in dp.points if p.data_wait_share is not None]
    bound = (" — input-bound" if max(waits) > INPUT_BOUND_SHARE else " — not input-bound") if waits else ""
    text = f"{DEVICE_LABEL[d]}: " + "; ".join(shares) + bound
    if dp.host_over_device is not None:
        text += f"; host placement runs at {u.ratio(dp.host_over_device)} the samples/s of data on the device"
    elif d == "cpu":
        text += " (on a CPU the host is the device: there is no host-to-device copy to measure)"
    return text


def _batching(m: ModelSection) -> Found:
    texts = []
    for d, b in m.batching.items():
        on, off = b.on, b.off
        if on is not None and off is not None and on.capacity_req_s and off.capacity_req_s is None:
            texts.append(f"{DEVICE_LABEL[d]}: dynamic batching carries {u.num(on.capacity_req_s)} requests/s within "
                         "the SLO, and with batching off no rate the search tried met it" + _at_shared_rate(m, b))
            continue
        if on is None or off is None or b.capacity_ratio is None:
            continue
        delta = f"{b.p99_delta_ms:+.2f} ms p99" if b.p99_delta_ms is not None else "p99 not measured"
        batch = f", mean batch {on.mean_batch:.1f}" if on.mean_batch is not None else ""
        texts.append(f"{DEVICE_LABEL[d]}: dynamic batching carries {u.ratio(b.capacity_ratio)} the requests/s within "
                     f"the SLO ({u.num(on.capacity_req_s)} vs {u.num(off.capacity_req_s)} with batching off{batch}), "
                     f"at {delta} ({u.ms(on.p99_ms)} vs {u.ms(off.p99_ms)}, each at its capacity)"
                     + _at_shared_rate(m, b))
    if not texts:
        return Found(None, "no Server scenario was measured with batching off")
    if "cuda" not in m.batching:
        texts.append("GPU: not measured in this run, as no GPU server ran")
    return Found("; ".join(texts) + ".")


def _at_shared_rate(m: ModelSection, b: BatchingCompare) -> str:
    """Both variants at one offered rate: their p50 and p99 side by side, or why that was not measured."""
    sr = b.shared_rate
    if sr is None:
        why = ("a Server search found no rate within the SLO, so there is no rate both carry"
               if not (b.off and b.off.capacity_req_s and b.on and b.on.capacity_req_s)
               else "no load offered both variants one rate")
        served = b.on.model if b.on is not None else f"{m.model}_{'gpu' if b.device == 'cuda' else 'cpu'}"
        return (f". At one shared rate: not measured in this run: {why}; `trainserve load --model {served} "
                f"--rate R --duration 10s`, and the same on {served}{NOBATCH_SUFFIX}, measures it")
    window = f", open loop for {sr.duration_s:g} s each" if sr.duration_s else ", open loop"
    return (f". At {u.num(sr.rate_req_s)} req/s offered to both ({sr.basis}{window}): batching p99 {u.ms(sr.on_p99_ms)} "
            f"(p50 {u.ms(sr.on_p50_ms)}), without batching p99 {u.ms(sr.off_p99_ms)} (p50 {u.ms(sr.off_p50_ms)})")


def _gpu_release(m: ModelSection) -> Found:
    t = m.train.get("cuda")
    if t is None or t.memory.gpu_released is None:
        return Found(None, "no GPU training record read NVML before and after training")
    mem = t.memory
    held = mem.gpu_held_after_bytes
    return Found(f"Released: {'yes' if mem.gpu_released else 'no'} — NVML showed {u.nbytes(mem.gpu_used_before_bytes)} "
                 f"used before training, {u.nbytes(mem.gpu_mem_used_max_bytes)} at its peak, and "
                 f"{u.nbytes(held)} more than before once training freed its memory (the process's CUDA context "
                 "stays until it exits)" + (f", and {u.nbytes(mem.gpu_used_after_exit_bytes)} used once it had exited"
                                            if mem.gpu_used_after_exit_bytes is not None else "") + ".")


def _scaling(m: ModelSection) -> Found:
    several = [c for c in m.train.values() if c is not None and (c.world_size or 1) > 1]
    if not several:
        return Found(None, "trainserve run trains on one device; scaling needs several GPUs and a run per count")
    c = several[0]
    return Found(f"{c.world_size} processes train {u.num(c.throughput_samples_s)} samples/s on the "
                 f"{DEVICE_LABEL[c.device]} (see docs/distributed.md for the per-count runs to set beside it).")


QUESTIONS: tuple[Question, ...] = (
    Question("train_speedup", "how much faster a GPU trains than a CPU", "#summary",
             "trainserve run  # on a machine with an NVIDIA GPU; or trainserve compare there", _train_speedup),
    Question("infer_speedup", "how much faster it answers at batch 1 and when saturated", "#summary",
             "trainserve run  # on a machine with an NVIDIA GPU", _infer_speedup),
    Question("train_memory", "how much memory training takes and why (weights, gradients, optimizer state, "
             "activations)", "#model-{m}", "trainserve train", lambda m: _memory(m, "train")),
    Question("infer_memory", "how much memory inference takes", "#model-{m}", "trainserve run",
             lambda m: _memory(m, "infer")),
    Question("max_batch", "the largest batch that fits, for training and for inference", "#max-batch-{m}",
             "trainserve train --device cuda --find-max-batch  # trainserve run does it on a GPU", _max_batch),
    Question("batch_precision", "what batch size and mixed precision do to training speed", "#sweep-{m}",
             "trainserve compare --sweep --device cuda (trainserve run does it unless --no-sweep)", _batch_precision),
    Question("data_path", "what data loading and host-to-device copies do to speed, and whether training is "
             "input-bound", "#data-path-{m}",
             "trainserve run  # on a machine with an NVIDIA GPU: its sweep compares host and device placement",
             _data_path),
    Question("dynamic_batching", "what dynamic batching buys a GPU server, and at what latency", "#batching-{m}",
             "trainserve run (it measures the Server scenario with batching off on each served device)", _batching),
    Question("gpu_release", "whether the GPU's memory is given back when training ends", "#model-{m}",
             "trainserve train --device cuda", _gpu_release),
    Question("scaling", "how training scales over several GPUs, and the learning rate with the batch",
             "#model-{m}", "trainserve train --nproc N --lr-scale linear --device cuda  # N = 1, 2, 4; "
             "docs/distributed.md", _scaling),
)


def answers(report: Report) -> list[Answer]:
    """One answer per question, over the report's models (a model's name leads when there are several)."""
    out = []
    several = len(report.models) > 1
    for q in QUESTIONS:
        found = [(name, q.answer(m)) for name, m in report.models.items()]
        said = [(name, f) for name, f in found if f.text is not None]
        first = next(iter(report.models), "")
        if said:
            text = " ".join(f"{name}: {f.text}" if several else str(f.text) for name, f in said)
            out.append(Answer(id=q.id, question=q.readme, measured=True, text=text,
                              link=q.link.format(m=said[0][0]), command=None))
        else:
            why = found[0][1].why if found else "the run has no records"
            out.append(Answer(id=q.id, question=q.readme, measured=False, text=f"not measured in this run: {why}",
                              link=None if not found else q.link.format(m=first), command=q.command))
    return out


def _times(sp: TrainSpeedup | InferSpeedup) -> str:
    return u.ratio(sp.value)


def _share(x: float | None) -> str:
    return u.MISSING if x is None else f"{100 * x:.0f}%" if x >= 0.01 else f"{100 * x:.1f}%"
