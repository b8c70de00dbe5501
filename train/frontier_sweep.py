"""The memory frontier's sweep (train/frontier.py measures one point): every series walked up the sizes until its
fit is stable, then each series' edge searched and bracketed, all within one time budget.

A point fits when it runs and its peak is within the capacity; a real out-of-memory is caught, recorded and
its memory given back before the next. A series stops walking at its first size that does not fit, or once
the fit of its earlier points predicts its newest; its edge is then searched: the largest size the fit
predicts to fit is measured (each jump at most MAX_EXTRAPOLATION x the parameters of the largest size that
fitted), the fit redone with it, until a size that fits has its next size measured not to fit.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainserve.core.errors import UserError
from trainserve.core.frontier_result import (
    MAX_EXTRAPOLATION,
    FrontierPoint,
    FrontierResult,
    SeriesFit,
    series_name,
    sharded_point,
)
from trainserve.train.frontier import (
    CPU_FP16_NOTE,
    MAX_EDGE_STEPS,
    ONNX_MAX_PARAMS,
    SEARCH_WEIGHT,
    STABLE_ERROR,
    STABLE_POINTS,
    WALK_SHARE,
    FrontierConfig,
    InferProbe,
    edge_candidates,
    export_variants,
    features,
    fit_series,
    gib,
    measure_train,
    millions,
    predict,
    predicted_edge,
    sample_inputs,
)


@dataclass
class _Series:
    name: str
    mode: str
    precision: str
    checkpointing: bool = False
    stopped: bool = False  # a size did not fit (or failed): no larger size is walked
    stable: bool = False  # its fit predicted its newest point: it leaves the walk for the edge search
    points: list[FrontierPoint] = field(default_factory=list)

    def fitting(self) -> list[FrontierPoint]:
        return [p for p in self.points if p.status == "fits" and p.peak_bytes]


def device_capacity(cfg: FrontierConfig) -> tuple[int | None, str, str]:
    """(capacity bytes or None, where it comes from, the device's name)."""
    if cfg.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise UserError("--device cuda needs a visible GPU; none is (pass --device cpu)")
        props = torch.cuda.get_device_properties(0)
        if cfg.memory_cap_bytes is not None:
            if cfg.memory_cap_bytes < props.total_memory:
                # a real out-of-memory at the cap: the caching allocator refuses past the fraction
                torch.cuda.set_per_process_memory_fraction(cfg.memory_cap_bytes / props.total_memory)
            return cfg.memory_cap_bytes, "--memory-cap-gib", props.name
        return int(props.total_memory), "the card's total memory", props.name
    from trainserve.core.profile import host_info

    name = host_info()["cpu_model"] or "CPU"
    if cfg.memory_cap_bytes is not None:
        return cfg.memory_cap_bytes, "--memory-cap-gib", name
    return None, ("no capacity: a CPU process is killed by the OS, not told it is out of memory; pass "
                  "--memory-cap-gib for an edge"), name


def _oom_text(e: BaseException) -> str | None:
    """The first line of an out-of-memory (torch's, or onnxruntime's failed allocation), else None."""
    from trainserve.train.maxbatch import is_oom

    text = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    if is_oom(e) or "failed to allocate memory" in str(e).lower():
        return text[:200]
    return None


def _failure_text(e: BaseException) -> str:
    first = str(e).strip().splitlines()[0][:200] if str(e).strip() else ""
    return f"{type(e).__name__}: {first}"


class _Sweep:
    """One device's sweep: the walk up the sizes, then each series' edge search, within one budget."""

    def __init__(self, cfg: FrontierConfig, infer_probe: InferProbe | None,
                 on_point: Callable[[FrontierPoint], None], tmp: Path) -> None:
        self.cfg, self.infer_probe, self.on_point, self.tmp = cfg, infer_probe, on_point, tmp
        self.t0 = time.monotonic()
        self.capacity, self.capacity_source, self.device_name = device_capacity(cfg)
        self.notes: list[str] = []
        self.stopped = ""
        self.series = [_Series(series_name("train", p, c), "train", p, c)
                       for p in cfg.train_precisions for c in cfg.checkpointing]
        if infer_probe is not None:
            infer = list(cfg.infer_precisions)
            if cfg.device == "cpu" and "fp16" in infer:
                infer.remove("fp16")
                self.notes.append(CPU_FP16_NOTE)
            self.series += [_Series(series_name("infer", p), "infer", p) for p in infer]
        self._feats: dict[int, tuple[int, int]] = {}
        self._exports: dict[int, dict[str, Path] | str] = {}
        self.searching = cfg.check_edge and self.capacity is not None
        self.target = self._search_target()
        # with an edge to search, the walk stops early enough to leave most of the budget to the searches
        self.walk_deadline = self.t0 + cfg.budget_s * (WALK_SHARE if self.searching else 1.0)
        self.deadline = self.t0 + cfg.budget_s

    def _search_target(self) -> int:
        """The bytes the edge search aims its predictions at: the capacity, or on a card without a cap what the
        allocator can get (free memory after the CUDA context and the runtime's own), which a real
        out-of-memory comes at first."""
        if self.capacity is None or self.cfg.device != "cuda" or self.cfg.memory_cap_bytes is not None:
            return self.capacity or 0
        import torch

        free, _ = torch.cuda.mem_get_info()
        usable = min(self.capacity, int(free) + torch.cuda.memory_reserved())
        self.notes.append(f"the edge search aims at the {gib(usable)} the allocator could get when it started, not "
                          f"the card's {gib(self.capacity)} (the CUDA context and libraries hold the rest)")
        return usable

    def feats(self, size: int) -> tuple[int, int]:
        if size not in self._feats:
            self._feats[size] = features(size, self.cfg)
        return self._feats[size]

    def exported(self, size: int) -> dict[str, Path] | str:
        """The ONNX files at `size` (made once for every inference series), or why they could not be made."""
        if size not in self._exports:
            folder = self.tmp / str(size)
            folder.mkdir(exist_ok=True)
            try:
                self._exports[size] = export_variants(size, self.cfg, folder)
            except UserError as e:
                self._exports[size] = str(e)
            except Exception as e:
                self._exports[size] = f"export failed: {_failure_text(e)}"
        return self._exports[size]

    def measure(self, s: _Series, size: int, source: str = "measured", predicted: int | None = None) -> FrontierPoint:
        """One point, recorded in the series: an out-of-memory or a peak past the capacity is `does_not_fit`,
        any other failure `error`; memory is given back before the next."""
        from trainserve.train.maxbatch import release_memory

        t1 = time.monotonic()
        point = FrontierPoint(series=s.name, mode=s.mode, precision=s.precision, checkpointing=s.checkpointing,
                              size=size, params=self.feats(size)[0], batch_size=self.cfg.batch_size, status="fits",
                              source=source, predicted_bytes=predicted)
        try:
            for k, v in self._run_point(s, size).items():
                setattr(point, k, v)
        except UserError:
            raise
        except _ExportFailed as e:
            point.status, point.note = "error", str(e)
        except Exception as e:  # an out-of-memory is a result; any other failure is recorded as an error
            oom = _oom_text(e)
            point.status, point.note = ("does_not_fit", oom) if oom else ("error", _failure_text(e))
        release_memory()  # outside the handler: the traceback held the step's tensors
        if point.status == "fits" and self.capacity is not None and (point.peak_bytes or 0) > self.capacity:
            point.status = "does_not_fit"
            point.note = f"peak {point.peak_bytes} bytes is past the capacity of {self.capacity} bytes"
        point.seconds = round(time.monotonic() - t1, 3)
        s.points.append(point)
        self.on_point(point)
        return point

    def _run_point(self, s: _Series, size: int) -> dict[str, Any]:
        if s.mode == "train":
            return measure_train(size, self.cfg, s.precision, s.checkpointing)
        exported = self.exported(size)
        if isinstance(exported, str):
            raise _ExportFailed(exported)
        assert self.infer_probe is not None
        (x,), _ = sample_inputs(self.cfg, self.cfg.batch_size, "cpu")
        return {"peak_bytes": int(self.infer_probe(exported[s.precision], {"input": x.numpy()}, self.cfg.device))}

    # the walk ------------------------------------------------------------------------------------------

    def walk(self) -> None:
        """Every series size by size, smallest first, until it stops, turns stable, or the walk's time ends."""
        for size in self.cfg.sizes:
            for s in self.series:
                if s.stopped or s.stable:
                    continue
                if time.monotonic() > self.walk_deadline:
                    self.stopped = self._budget_text(f"at size {size}")
                    return
                p = self.measure(s, size)
                s.stopped = p.status != "fits"  # the next size is larger: it would not fit either
                s.stable = self.searching and not s.stopped and self._stable(s)

    def _budget_text(self, where: str) -> str:
        part = "" if self.walk_deadline == self.deadline else f" walk's share ({WALK_SHARE:.0%}) of the"
        return f"the{part} {self.cfg.budget_s:g} s budget ran out {where}"

    def _stable(self, s: _Series) -> bool:
        """The fit of every earlier point predicts the newest within STABLE_ERROR: the series may jump."""
        rows = self.rows(s)
        if len(rows) < STABLE_POINTS:
            return False
        a, b, c, _ = fit_series(rows[:-1], self.cfg.batch_size)
        params, acts, measured = rows[-1]
        return abs(a * params + b * self.cfg.batch_size * acts + c - measured) <= STABLE_ERROR * measured

    def rows(self, s: _Series) -> list[tuple[int, int, int]]:
        return [(*self.feats(p.size), int(p.peak_bytes)) for p in s.fitting()]  # type: ignore[arg-type]

    def fit(self, s: _Series) -> SeriesFit | None:
        rows = self.rows(s)
        if len(rows) < 2:
            return None
        a, b, c, err = fit_series(rows, self.cfg.batch_size)
        return SeriesFit(series=s.name, a=a, b=b, c=c, points=len(rows), max_rel_error=round(err, 4))

    # the edge ------------------------------------------------------------------------------------------

    def edges(self) -> list[SeriesFit]:
        """Each series' fit, and where there is a capacity its edge searched: the remaining budget shared among
        the series still to search, a training series twice an inference one's (its sizes reach further)."""
        fits = []
        todo = [s for s in self.series if self.fit(s) is not None]
        for i, s in enumerate(todo):
            weights = [SEARCH_WEIGHT[t.mode] for t in todo[i:]]
            share = (self.deadline - time.monotonic()) * weights[0] / sum(weights)
            fits.append(self.edge(s, time.monotonic() + share))
        return fits

    def edge(self, s: _Series, deadline: float) -> SeriesFit:
        """Bracket the series' edge: measure the largest size the fit predicts to fit, refit, and go on until a
        size that fits has its next size measured not to fit (the edge), the fit's trusted range bounding each
        jump; a prediction that failed is bisected instead of trusted again."""
        fit = self.fit(s)
        assert fit is not None
        if self.capacity is None:
            fit.note = self.capacity_source
            return fit
        if not self.cfg.check_edge:
            return self._predicted_only(s, fit, "not checked")
        measured_before, trusted = len(s.points), True
        for _ in range(MAX_EDGE_STEPS):
            fit = self.fit(s) or fit
            if self._bracketed(s):
                break  # lo fits, the next size does not
            lo, hi = self._bracket(s)
            size, predicted = self._next_size(s, fit, lo, hi, trusted)
            why = self._cannot_measure(s, size, deadline)
            if why:
                fit.note = why
                break
            p = self.measure(s, size, source="edge_check", predicted=predicted)
            if p.status == "error":
                fit.note = f"edge search stopped: {p.note}"
                break
            # a size predicted to fit that did not: the fit is optimistic this close to the edge, bisect from here on
            trusted = trusted and (p.status == "fits" or predicted is None or predicted > self.target)
        else:
            fit.note = f"edge search stopped after {MAX_EDGE_STEPS} sizes, the edge not bracketed"
        if len(s.points) == measured_before and not self._bracketed(s):
            return self._predicted_only(s, fit, fit.note or "not checked")
        final = self.fit(s) or fit
        final.note = fit.note
        return self._record_edge(s, final)

    def _bracketed(self, s: _Series) -> bool:
        lo, hi = self._bracket(s)
        cands = edge_candidates(self.cfg, lo)
        return hi is not None and len(cands) > 1 and cands[1] >= hi

    def _predicted_only(self, s: _Series, fit: SeriesFit, note: str) -> SeriesFit:
        """The fit's edge, not measured: a lower bound where it lies past the range the fit is trusted for."""
        largest = max(p.size for p in s.fitting())
        size, params, predicted = predicted_edge(fit, self.cfg, largest, self.target, self.feats)
        fit.edge_size, fit.edge_params, fit.edge_predicted_bytes = size, params, predicted
        fit.beyond = params >= self.feats(largest)[0] * MAX_EXTRAPOLATION * 0.9
        fit.note = "the largest measured size is the predicted edge" if size == largest else note
        return fit

    def _bracket(self, s: _Series) -> tuple[int, int | None]:
        """(largest size that fit, smallest size that did not, or None)."""
        lo = max(p.size for p in s.fitting())
        over = [p.size for p in s.points if p.status == "does_not_fit" and p.size > lo]
        return lo, min(over, default=None)

    def _next_size(self, s: _Series, fit: SeriesFit, lo: int, hi: int | None,
                   trusted: bool) -> tuple[int, int | None]:
        """(the size to measure next, the fit's bytes there) inside (lo, hi): the fit's edge, the next size when
        the fit puts the edge at lo, the middle when its last prediction failed."""
        cands = [c for c in edge_candidates(self.cfg, lo)[1:] if hi is None or c < hi]
        if not trusted and len(cands) > 1:
            size = cands[(len(cands) - 1) // 2]
        else:
            edge, _, _ = predicted_edge(fit, self.cfg, lo, self.target, self.feats,
                                        below=hi, limit_params=self._export_limit(s))
            size = edge if edge != lo else cands[0]
        params, acts = self.feats(size)
        return size, predict(fit, params, acts, self.cfg.batch_size)

    def _export_limit(self, s: _Series) -> int | None:
        return ONNX_MAX_PARAMS if s.mode == "infer" else None

    def _cannot_measure(self, s: _Series, size: int, deadline: float) -> str:
        if time.monotonic() > min(deadline, self.deadline):
            return "edge search stopped: the series' share of the budget ran out"
        limit = self._export_limit(s)
        if limit is not None and self.feats(size)[0] > limit:
            return (f"edge search stopped at {millions(self.feats(size)[0])} parameters: one ONNX file holds at most "
                    f"2 GiB, about {millions(limit)} fp32 parameters")
        return ""

    def _record_edge(self, s: _Series, fit: SeriesFit) -> SeriesFit:
        """The fit, with its edge: the largest size that fit, the prediction made before measuring it, its error,
        and the size above it."""
        lo, hi = self._bracket(s)
        at = next(p for p in s.points if p.size == lo and p.status == "fits")
        fit.edge_size, fit.edge_params = lo, at.params
        fit.beyond = False
        if at.source == "edge_check":
            fit.edge_checked, fit.edge_measured_bytes = "fits", at.peak_bytes
            fit.edge_predicted_bytes = at.predicted_bytes
            if at.predicted_bytes and at.peak_bytes:
                fit.edge_error = round((at.peak_bytes - at.predicted_bytes) / at.predicted_bytes, 4)
        else:  # the edge among the walked sizes: the fit's figure there is a fit, not a prediction
            fit.edge_predicted_bytes = predict(fit, *self.feats(lo), self.cfg.batch_size)
            if not fit.note:
                fit.note = "the largest walked size is the edge"
        above = [p for p in s.points if p.size > lo and p.status != "skipped"]
        if above:
            first = min(above, key=lambda p: p.size)
            fit.edge_above_size, fit.edge_above_checked = first.size, first.status
        return fit

    def sharded(self) -> list[FrontierPoint]:
        """Per-rank series of FSDP2 sharding, modelled from every training point without checkpointing that ran."""
        return [sharded_point(p, n, self.capacity) for n in self.cfg.shard_ranks for s in self.series
                if s.mode == "train" and not s.checkpointing for p in s.points if p.weights_bytes is not None]

    def result(self, fits: list[SeriesFit]) -> FrontierResult:
        cfg = self.cfg
        return FrontierResult(
            device=cfg.device, device_name=self.device_name, model=cfg.model, batch_size=cfg.batch_size,
            capacity_bytes=self.capacity, capacity_source=self.capacity_source,
            seq_len=cfg.seq_len if cfg.model == "transformer" else None,
            points=[p for s in self.series for p in s.points] + self.sharded(), fits=fits, budget_s=cfg.budget_s,
            seconds=round(time.monotonic() - self.t0, 2), stopped=self.stopped, notes=self.notes,
            versions=_versions())


class _ExportFailed(Exception):
    """The ONNX export at a size failed: its inference points are errors, not out-of-memory."""


def run_frontier(cfg: FrontierConfig, infer_probe: InferProbe | None = None,
                 on_point: Callable[[FrontierPoint], None] = lambda p: None) -> FrontierResult:
    """Walk every series up the sizes until its fit is stable, then search each series' edge, within the budget."""
    with tempfile.TemporaryDirectory(prefix="frontier-") as tmp:
        sweep = _Sweep(cfg, infer_probe, on_point, Path(tmp))
        sweep.walk()
        return sweep.result(sweep.edges())


def _versions() -> dict[str, str]:
    import torch

    out = {"torch": torch.__version__}
    try:
        import onnxruntime

        out["onnxruntime"] = onnxruntime.__version__
    except ImportError:
        pass
    return out
