"""The memory frontier: how large a model a device can train, and serve, at one batch.

A family scaled by one number (the transformer's d_model, depth growing with it; or a user model's
`--size-arg`) is measured size by size, smallest first, in several series: training in fp32 and bf16
(autocast), each with and without activation checkpointing, and inference of the exported fp32, fp16 and
int8 ONNX models. A training point is one full step (forward, backward, AdamW step) after a first step
that made the optimizer state: its peak is split into weights, gradients and optimizer state (from tensor
sizes) and activations and temporaries (the rest). An inference point is the working set of a fresh
onnxruntime session run once at the batch (its arena included), measured by the probe the caller passes
(serve/ owns onnxruntime; this module only exports).

A point fits when it runs and its peak is within the capacity (the card's memory, or --memory-cap-gib); a
real CUDA out-of-memory is caught, recorded and given back. A series stops at its first size that does not
fit. Each series then gets a memory model fitted to its measured points,
bytes ≈ a·params + b·batch·activations_per_sample + c, whose features come from building the model on the
meta device (no memory), so it predicts sizes never built; the largest size it predicts to fit is then
measured, to check it. torch is imported inside the functions.
"""

from __future__ import annotations

import logging
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainserve.core.errors import UserError
from trainserve.core.frontier_result import MAX_EXTRAPOLATION, FrontierPoint, FrontierResult, SeriesFit, series_name

log = logging.getLogger(__name__)

GIB = 2**30
TRAIN_PRECISIONS = ("fp32", "bf16")
INFER_PRECISIONS = ("fp32", "fp16", "int8")
# d_model of each rung: about twice the parameters of the one before (depth grows with width, see layers_for)
TRANSFORMER_SIZES = (64, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096)
EDGE_STEP = 32  # the transformer's edge is searched on d_model multiples of this (a multiple of the heads' width)

CPU_FP16_NOTE = ("inference fp16 is measured on GPUs only: onnxruntime's CPU provider crashes (a segmentation "
                 "fault) building a session of the fp16 transformer, and the project serves fp16 on GPUs alone")
# InferProbe(onnx_path, feeds, device) -> working-set bytes; raises on failure (serve/model/frontier_probe.py)
InferProbe = Callable[[Path, dict[str, Any], str], int]


@dataclass
class FrontierConfig:
    """What `trainserve frontier` measures on one device."""

    model: str = "transformer"  # the zoo's transformer, or a function of your own: file.py:build
    size_arg: str | None = None  # your own model: the keyword argument that scales it (e.g. width)
    sizes: tuple[int, ...] = TRANSFORMER_SIZES  # values of the scaled argument, ascending
    device: str = "cpu"
    batch_size: int = 8  # samples per step, every point
    seq_len: int = 128  # transformer: tokens per sample
    vocab_size: int = 8192  # transformer: token ids
    input_shape: tuple[int, ...] | None = None  # your own model: one sample's input
    input_dtype: str = "float32"
    num_classes: int = 10
    train_precisions: tuple[str, ...] = TRAIN_PRECISIONS
    checkpointing: tuple[bool, ...] = (False, True)
    infer_precisions: tuple[str, ...] = INFER_PRECISIONS  # () : no inference points
    memory_cap_bytes: int | None = None  # the capacity; None: the card's total memory on CUDA, no edge on a CPU
    budget_s: float = 300.0  # seconds for all the points; the point that would start past it is skipped
    check_edge: bool = True  # measure at each series' predicted edge

    def __post_init__(self) -> None:
        self.sizes = tuple(int(s) for s in self.sizes)
        if not self.sizes or any(s < 1 for s in self.sizes) or list(self.sizes) != sorted(set(self.sizes)):
            raise UserError(f"sizes={list(self.sizes)} is invalid; give ascending distinct sizes >= 1")
        if self.device not in ("cpu", "cuda"):
            raise UserError(f"device={self.device!r} is invalid; allowed: cpu, cuda")
        if self.batch_size < 1:
            raise UserError(f"batch_size={self.batch_size} is invalid; allowed: >= 1")
        if self.model == "transformer":
            if any(s % 16 for s in self.sizes):
                raise UserError(f"sizes={list(self.sizes)} is invalid for the transformer; each d_model must be a "
                                "multiple of 16")
        elif ":" not in self.model:
            raise UserError(f"model={self.model!r} is invalid; allowed: transformer, or your own file.py:build with "
                            "--size-arg")
        elif not self.size_arg or self.input_shape is None:
            raise UserError(f"model={self.model!r} needs --size-arg (the argument that scales it) and --input-shape")
        bad = [p for p in self.train_precisions if p not in TRAIN_PRECISIONS]
        if bad:
            raise UserError(f"train_precisions={bad} is invalid; allowed: {', '.join(TRAIN_PRECISIONS)}")
        bad = [p for p in self.infer_precisions if p not in INFER_PRECISIONS]
        if bad:
            raise UserError(f"infer_precisions={bad} is invalid; allowed: {', '.join(INFER_PRECISIONS)}")
        if self.memory_cap_bytes is not None and self.memory_cap_bytes <= 0:
            raise UserError(f"memory_cap_bytes={self.memory_cap_bytes} is invalid; allowed: > 0")
        if not self.budget_s > 0:
            raise UserError(f"budget_s={self.budget_s} is invalid; allowed: > 0 s")


# --- the family, by size --------------------------------------------------------------------------

def layers_for(d_model: int) -> int:
    """Depth grows with width (GPT-like shapes): 2 layers up to d 128, then one per 64 of width, at most 48."""
    return max(2, min(48, d_model // 64))


def transformer_at(size: int, cfg: FrontierConfig) -> Any:
    from trainserve.train.models import TransformerConfig

    head_dim = next(h for h in (64, 32, 16) if size % h == 0)  # sizes are multiples of 16
    heads = size // head_dim
    return TransformerConfig(vocab_size=cfg.vocab_size, seq_len=cfg.seq_len, d_model=size, n_heads=heads,
                             n_layers=layers_for(size), d_ff=4 * size, num_classes=cfg.num_classes)


def build_at(size: int, cfg: FrontierConfig) -> Any:
    """The torch module at `size` (built on torch's current default device)."""
    if cfg.model == "transformer":
        from trainserve.train.models import build_model

        return build_model(transformer_at(size, cfg))
    from trainserve.train.usermodel import load_function

    return load_function(cfg.model)(**{cfg.size_arg: size})


def sample_inputs(cfg: FrontierConfig, batch: int, device: Any) -> tuple[tuple[Any, ...], Any]:
    """(inputs, labels) of one batch, made on `device`."""
    import torch

    g = torch.Generator(device="cpu").manual_seed(0)
    if cfg.model == "transformer":
        x = torch.randint(0, cfg.vocab_size, (batch, cfg.seq_len), generator=g)
    elif cfg.input_dtype == "int64":
        x = torch.randint(0, cfg.vocab_size, (batch, *cfg.input_shape), generator=g)
    else:
        x = torch.randn((batch, *cfg.input_shape), generator=g)
    y = torch.randint(0, cfg.num_classes, (batch,), generator=g)
    return (x.to(device),), y.to(device)


def features(size: int, cfg: FrontierConfig) -> tuple[int, int]:
    """(parameters, activation elements of one sample): the model built and run on the meta device, so a size
    far past the capacity costs no memory. The activation count is the sum of every leaf module's output."""
    import torch

    inputs = tuple(t.to("meta") for t in sample_inputs(cfg, 1, "cpu")[0])
    with torch.device("meta"):
        model = build_at(size, cfg)
        params = sum(p.numel() for p in model.parameters())
        total = [0]

        def count(_m: Any, _i: Any, out: Any) -> None:
            for t in out if isinstance(out, tuple) else (out,):
                if isinstance(t, torch.Tensor):
                    total[0] += t.numel()

        leaves = [m for m in model.modules() if not list(m.children())]
        hooks = [m.register_forward_hook(count) for m in leaves]
        try:
            model.train()
            model(*inputs)
        finally:
            for h in hooks:
                h.remove()
    return int(params), int(total[0])


# --- activation checkpointing ------------------------------------------------------------------------

def apply_checkpointing(model: Any) -> int:
    """Wrap each block of the model's longest ModuleList/Sequential in torch.utils.checkpoint; the number
    wrapped. The blocks' inputs are kept, their insides recomputed in backward."""
    from torch import nn

    lists = [m for m in model.modules() if isinstance(m, nn.ModuleList | nn.Sequential) and len(m) >= 2]
    if not lists:
        raise UserError("activation checkpointing needs the model's blocks in an nn.ModuleList or nn.Sequential; "
                        "this model has none")
    blocks = max(lists, key=len)
    for i in range(len(blocks)):
        blocks[i] = _checkpointed(blocks[i])
    return len(blocks)


def _checkpointed(inner: Any) -> Any:
    from torch import nn
    from torch.utils.checkpoint import checkpoint

    class Checkpointed(nn.Module):
        def __init__(self, inner: nn.Module) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, *args: Any, **kwargs: Any) -> Any:
            return checkpoint(self.inner, *args, use_reentrant=False, **kwargs)

        def __getattr__(self, name: str) -> Any:  # nn.TransformerEncoder reads its first layer's attributes
            try:
                return super().__getattr__(name)
            except AttributeError:
                return getattr(self._modules["inner"], name)

    return Checkpointed(inner)


# --- one training point --------------------------------------------------------------------------

def measure_train(size: int, cfg: FrontierConfig, precision: str, checkpointing: bool) -> dict[str, int]:
    """Peak bytes of one steady training step at `size`, and its split (weights, gradients, optimizer,
    activations); raises what the step raised (an out-of-memory included)."""
    import torch
    from torch import nn

    from trainserve.train.memory import cpu_step_peak_bytes, optimizer_state_bytes, tensor_bytes

    device = torch.device(cfg.device)
    cuda = device.type == "cuda"
    if cuda:
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
    torch.manual_seed(0)
    model = build_at(size, cfg).to(device)
    if checkpointing:
        apply_checkpointing(model)
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-4)
    inputs, labels = sample_inputs(cfg, cfg.batch_size, device)
    dtype = {"bf16": torch.bfloat16}.get(precision)

    def step() -> None:
        with torch.autocast(device.type, dtype=dtype, enabled=dtype is not None):
            logits = model(*inputs)
        nn.functional.cross_entropy(logits.float(), labels).backward()
        opt.step()
        if cuda:
            torch.cuda.synchronize()

    try:
        weights = tensor_bytes(params) + tensor_bytes(model.buffers())
        step()  # the first step makes AdamW's state
        gradients = tensor_bytes(p.grad for p in params)
        optimizer = optimizer_state_bytes(opt)
        opt.zero_grad(set_to_none=True)
        if cuda:
            torch.cuda.reset_peak_memory_stats()
            step()
            inputs_bytes = tensor_bytes((*inputs, labels))
            peak = torch.cuda.max_memory_allocated() - base - inputs_bytes
        else:
            _, step_peak = cpu_step_peak_bytes(step)
            if step_peak is None:
                raise RuntimeError("torch's profiler recorded no CPU allocation during the step")
            peak = weights + optimizer + step_peak  # at the step's start: weights and state, gradients freed
        opt.zero_grad(set_to_none=True)
    finally:
        del model, opt, params
    activations = max(0, peak - weights - gradients - optimizer)
    return {"peak_bytes": int(peak), "weights_bytes": int(weights), "gradients_bytes": int(gradients),
            "optimizer_bytes": int(optimizer), "activations_bytes": int(activations)}


# --- inference: the exported models -----------------------------------------------------------------

def export_variants(size: int, cfg: FrontierConfig, folder: Path) -> dict[str, Path]:
    """fp32, fp16 and int8 ONNX files of the model at `size` (those of cfg.infer_precisions) in `folder`.

    The TorchScript exporter: the dynamo exporter takes seconds more per size and makes the same graph for
    these models; train/export.py's stage still prefers dynamo."""
    import torch

    from trainserve.core.card import ModelCard, TensorSpec
    from trainserve.train.export import _export_torchscript, _quiet_output, make_fp16, make_int8

    model = build_at(size, cfg).eval()
    (x,), _ = sample_inputs(cfg, 2, "cpu")
    card = ModelCard(family="frontier", preset=None, config={}, inputs=[TensorSpec("input", list(x.shape[1:]),
                     str(x.numpy().dtype))], outputs=[TensorSpec("logits", [cfg.num_classes], "float32")],
                     classes=[])
    fp32 = folder / "model.onnx"
    fastpath = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(False)  # its fused encoder-layer op has no ONNX form
    try:
        with torch.no_grad(), _quiet_output():  # a failing TorchScript export prints its whole graph
            _export_torchscript(model, (x,), card, fp32, None)
    finally:
        torch.backends.mha.set_fastpath_enabled(fastpath)
    out = {"fp32": fp32}
    if "fp16" in cfg.infer_precisions:
        make_fp16(fp32, folder / "model.fp16.onnx")
        out["fp16"] = folder / "model.fp16.onnx"
    if "int8" in cfg.infer_precisions:
        make_int8(fp32, folder / "model.int8.onnx")
        out["int8"] = folder / "model.int8.onnx"
    return {p: out[p] for p in cfg.infer_precisions}


# --- the fit --------------------------------------------------------------------------------------

def fit_series(rows: list[tuple[int, int, int]], batch: int) -> tuple[float, float, float, float]:
    """(a, b, c, worst relative error) of bytes ≈ a·params + b·batch·acts + c over (params, acts, bytes) rows.

    Non-negative least squares on relative error (each row divided by its bytes), so the small sizes count
    as much as the large and no term can go negative and shrink a prediction far from the points; with
    fewer than three points c is 0, with one point b is 0 too."""
    import numpy as np
    from scipy.optimize import nnls

    p = np.array([r[0] for r in rows], float)
    a_ = np.array([r[1] for r in rows], float) * batch
    y = np.array([r[2] for r in rows], float)
    cols = [p, a_, np.ones_like(p)][: min(3, len(rows))]
    X = np.stack(cols, axis=1) / y[:, None]
    coef, _ = nnls(X, np.ones_like(y))
    coef = list(coef) + [0.0] * (3 - len(coef))
    pred = coef[0] * p + coef[1] * a_ + coef[2]
    err = float(np.max(np.abs(pred - y) / y))
    return float(coef[0]), float(coef[1]), float(coef[2]), err


def predict(fit: SeriesFit, params: int, acts: int, batch: int) -> int:
    return int(fit.a * params + fit.b * batch * acts + fit.c)


def edge_candidates(cfg: FrontierConfig, largest_fit: int) -> list[int]:
    """Sizes to search for the edge, ascending, from the largest measured size that fit."""
    if cfg.model == "transformer":
        start = (largest_fit // EDGE_STEP + 1) * EDGE_STEP
        return [largest_fit, *range(start, 65536 + 1, EDGE_STEP)]
    out, s = [largest_fit], float(largest_fit)
    while len(out) < 200:
        s *= 1.05
        if int(s) > out[-1]:
            out.append(int(s))
    return out


def predicted_edge(fit: SeriesFit, cfg: FrontierConfig, largest_fit: int, capacity: int,
                   feats: Callable[[int], tuple[int, int]]) -> tuple[int, int, int]:
    """(size, params, predicted bytes) of the largest candidate predicted to fit (bisection: bytes grow with size),
    among the sizes within MAX_EXTRAPOLATION of the largest measured one."""
    limit = MAX_EXTRAPOLATION * feats(largest_fit)[0]
    cands = edge_candidates(cfg, largest_fit)

    def ok(i: int) -> bool:  # monotonic in i: parameters and predicted bytes both grow with size
        params, acts = feats(cands[i])
        return i == 0 or (params <= limit and predict(fit, params, acts, cfg.batch_size) <= capacity)

    lo, hi = 0, len(cands) - 1
    if ok(hi):
        lo = hi
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if ok(mid):
            lo = mid
        else:
            hi = mid
    params, acts = feats(cands[lo])
    return cands[lo], params, predict(fit, params, acts, cfg.batch_size)


# --- the sweep ---------------------------------------------------------------------------------------

@dataclass
class _Series:
    name: str
    mode: str
    precision: str
    checkpointing: bool = False
    stopped: bool = False
    points: list[FrontierPoint] = field(default_factory=list)


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


def run_frontier(cfg: FrontierConfig, infer_probe: InferProbe | None = None,
                 on_point: Callable[[FrontierPoint], None] = lambda p: None) -> FrontierResult:
    """Measure every series size by size within the budget, fit each, check each predicted edge."""
    from trainserve.train.maxbatch import release_memory

    t0 = time.monotonic()
    capacity, capacity_source, device_name = device_capacity(cfg)
    series = [_Series(series_name("train", p, c), "train", p, c) for p in cfg.train_precisions for c in cfg.checkpointing]
    notes: list[str] = []
    if infer_probe is not None:
        infer = list(cfg.infer_precisions)
        if cfg.device == "cpu" and "fp16" in infer:
            infer.remove("fp16")
            notes.append(CPU_FP16_NOTE)
        series += [_Series(series_name("infer", p), "infer", p) for p in infer]
    feats_cache: dict[int, tuple[int, int]] = {}

    def feats(size: int) -> tuple[int, int]:
        if size not in feats_cache:
            feats_cache[size] = features(size, cfg)
        return feats_cache[size]

    stopped = ""

    def over_budget() -> bool:
        return time.monotonic() - t0 > cfg.budget_s

    def measure(s: _Series, size: int, exported: dict[str, Path] | None, source: str = "measured",
                predicted: int | None = None) -> FrontierPoint:
        params = feats(size)[0]
        t1 = time.monotonic()
        point = FrontierPoint(series=s.name, mode=s.mode, precision=s.precision, checkpointing=s.checkpointing,
                              size=size, params=params, batch_size=cfg.batch_size, status="fits", source=source,
                              predicted_bytes=predicted)
        failure: str | None = None
        try:
            if s.mode == "train":
                for k, v in measure_train(size, cfg, s.precision, s.checkpointing).items():
                    setattr(point, k, v)
            else:
                assert infer_probe is not None and exported is not None
                (x,), _ = sample_inputs(cfg, cfg.batch_size, "cpu")
                point.peak_bytes = int(infer_probe(exported[s.precision], {"input": x.numpy()}, cfg.device))
        except Exception as e:  # an out-of-memory is a result; any other failure is recorded as an error
            if isinstance(e, UserError):
                raise
            oom = _oom_text(e)
            point.status = "does_not_fit" if oom else "error"
            failure = oom or f"{type(e).__name__}: {str(e).strip().splitlines()[0][:200] if str(e).strip() else ''}"
        release_memory()  # outside the handler: the traceback held the step's tensors
        if failure:
            point.note = failure
        elif capacity is not None and point.peak_bytes is not None and point.peak_bytes > capacity:
            point.status = "does_not_fit"
            point.note = f"peak {point.peak_bytes} bytes is past the capacity of {capacity} bytes"
        point.seconds = round(time.monotonic() - t1, 3)
        on_point(point)
        return point

    def exports(size: int, folder: Path, wanted: list[_Series]) -> dict[str, Path] | str:
        try:
            return export_variants(size, cfg, folder)
        except Exception as e:
            if isinstance(e, UserError):
                return str(e)
            return f"export failed: {type(e).__name__}: {str(e).strip()[:200]}"

    with tempfile.TemporaryDirectory(prefix="frontier-") as tmp:
        for size in cfg.sizes:
            live = [s for s in series if not s.stopped]
            if not live:
                break
            if over_budget():
                stopped = f"the {cfg.budget_s:g} s budget ran out before size {size}"
                break
            exported: dict[str, Path] | str | None = None
            for s in live:
                if over_budget():
                    stopped = f"the {cfg.budget_s:g} s budget ran out at size {size}"
                    break
                if s.mode == "infer" and exported is None:
                    folder = Path(tmp) / str(size)
                    folder.mkdir()
                    exported = exports(size, folder, live)
                if s.mode == "infer" and isinstance(exported, str):
                    p = FrontierPoint(series=s.name, mode="infer", precision=s.precision, checkpointing=False,
                                      size=size, params=feats(size)[0], batch_size=cfg.batch_size, status="error",
                                      note=exported)
                    on_point(p)
                else:
                    p = measure(s, size, exported if isinstance(exported, dict) else None)
                s.points.append(p)
                if p.status != "fits":
                    s.stopped = True  # the next size is larger: it would not fit either
            if stopped:
                break

        fits = []
        for s in series:
            fit = _fit(s, cfg, feats)
            if fit is None:
                continue
            fits.append(fit)
            if capacity is None:
                fit.note = capacity_source
                continue
            largest = max(p.size for p in s.points if p.status == "fits" and p.source == "measured")
            size, params, predicted = predicted_edge(fit, cfg, largest, capacity, feats)
            fit.edge_size, fit.edge_params, fit.edge_predicted_bytes = size, params, predicted
            if params >= feats(largest)[0] * MAX_EXTRAPOLATION * 0.9:
                fit.beyond = True  # the edge lies past what the fit is trusted for: a lower bound only
            if not cfg.check_edge or over_budget() or size == largest:
                fit.note = ("the largest measured size is the predicted edge" if size == largest
                            else "not checked: the budget ran out" if cfg.check_edge else "not checked")
                continue
            exported = None
            if s.mode == "infer":
                folder = Path(tmp) / f"edge-{size}"
                folder.mkdir(exist_ok=True)
                exported = exports(size, folder, [s])
                if isinstance(exported, str):
                    fit.note = exported
                    continue
            p = measure(s, size, exported, source="edge_check", predicted=predicted)
            s.points.append(p)
            fit.edge_checked, fit.edge_measured_bytes = p.status, p.peak_bytes
    return FrontierResult(
        device=cfg.device, device_name=device_name, model=cfg.model, batch_size=cfg.batch_size,
        capacity_bytes=capacity, capacity_source=capacity_source,
        seq_len=cfg.seq_len if cfg.model == "transformer" else None,
        points=[p for s in series for p in s.points], fits=fits, budget_s=cfg.budget_s,
        seconds=round(time.monotonic() - t0, 2), stopped=stopped, notes=notes, versions=_versions())


def _fit(s: _Series, cfg: FrontierConfig, feats: Callable[[int], tuple[int, int]]) -> SeriesFit | None:
    rows = [(*feats(p.size), p.peak_bytes) for p in s.points
            if p.status == "fits" and p.source == "measured" and p.peak_bytes]
    if len(rows) < 2:
        return None
    a, b, c, err = fit_series(rows, cfg.batch_size)
    return SeriesFit(series=s.name, a=a, b=b, c=c, points=len(rows), max_rel_error=round(err, 4))


def _versions() -> dict[str, str]:
    import torch

    out = {"torch": torch.__version__}
    try:
        import onnxruntime

        out["onnxruntime"] = onnxruntime.__version__
    except ImportError:
        pass
    return out


def fit_of(result: FrontierResult, series: str) -> SeriesFit | None:
    return next((f for f in result.fits if f.series == series), None)


def gib(n: float | None) -> str:
    return "-" if n is None else f"{n / GIB:.3g} GiB"


def millions(n: int | None) -> str:
    return "-" if n is None else f"{n / 1e6:.3g} M" if n >= 1e5 else f"{n / 1e6:.2g} M"

