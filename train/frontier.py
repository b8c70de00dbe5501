"""The memory frontier: how large a model a device can train, and serve, at one batch.

A family scaled by one number (the transformer's d_model, depth growing with it; or a user model's
`--size-arg`) is measured size by size, smallest first, in several series: training in fp32 and bf16
(autocast), each with and without activation checkpointing, and inference of the exported fp32, fp16 and
int8 ONNX models. A training point is one full step (forward, backward, AdamW step) after a first step
that made the optimizer state, its two phases (forward/backward, the optimizer step) measured apart: its
peak is the larger, split into weights, gradients and optimizer state (from tensor sizes) and activations
(forward/backward's peak less those) or the step's temporaries. An inference point is the working set of a fresh
onnxruntime session run once at the batch (its arena included), measured by the probe the caller passes
(serve/ owns onnxruntime; this module only exports).

A point fits when it runs and its peak is within the capacity (the card's memory, or --memory-cap-gib); a
real CUDA out-of-memory is caught, recorded and given back. Each series gets a memory model fitted to its
measured points, bytes ≈ a·params + b·batch·activations_per_sample + c, whose features come from building
the model on the meta device (no memory), so it predicts sizes never built; the sweep (walk up the sizes,
then each series' edge searched with it and bracketed) is train/frontier_sweep.py. torch is imported inside
the functions.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainserve.core.errors import UserError
from trainserve.core.frontier_result import MAX_EXTRAPOLATION, FrontierResult, SeriesFit

log = logging.getLogger(__name__)

GIB = 2**30
TRAIN_PRECISIONS = ("fp32", "bf16")
INFER_PRECISIONS = ("fp32", "fp16", "int8")
# d_model of each rung: about twice the parameters of the one before (depth grows with width, see layers_for)
TRANSFORMER_SIZES = (64, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096)
PHASE_FB, PHASE_STEP = "forward/backward", "optimizer step"  # which phase set a training peak
# the edge search: a series leaves the walk once the fit of its earlier points predicts its newest (at least
# STABLE_POINTS of them) within STABLE_ERROR; with an edge to search the walk gets WALK_SHARE of the budget;
# a search measures at most MAX_EDGE_STEPS sizes (each jump at most MAX_EXTRAPOLATION x the parameters)
STABLE_POINTS, STABLE_ERROR, WALK_SHARE, MAX_EDGE_STEPS = 3, 0.10, 0.4, 12
SEARCH_WEIGHT = {"train": 2.0, "infer": 1.0}  # shares of the search budget
ONNX_MAX_PARAMS = 2**31 // 4 - 2**24  # one ONNX protobuf holds 2 GiB: fp32 weights and some graph beside them
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
    shard_ranks: tuple[int, ...] = (2,)  # per-rank sharded series modelled from each unsharded training series

    def __post_init__(self) -> None:
        self.sizes = tuple(int(s) for s in self.sizes)
        if not self.sizes or any(s < 1 for s in self.sizes) or list(self.sizes) != sorted(set(self.sizes)):
            raise UserError(f"sizes={list(self.sizes)} is invalid; give ascending distinct sizes >= 1")
        _allowed("device", [self.device], ("cpu", "cuda"))
        _allowed("train_precisions", self.train_precisions, TRAIN_PRECISIONS)
        _allowed("infer_precisions", self.infer_precisions, INFER_PRECISIONS)
        for name, value, ok, allowed in (("batch_size", self.batch_size, self.batch_size >= 1, ">= 1"),
                                         ("memory_cap_bytes", self.memory_cap_bytes,
                                          self.memory_cap_bytes is None or self.memory_cap_bytes > 0, "> 0"),
                                         ("budget_s", self.budget_s, self.budget_s > 0, "> 0 s")):
            if not ok:
                raise UserError(f"{name}={value} is invalid; allowed: {allowed}")
        self._check_model()

    def _check_model(self) -> None:
        if self.model == "transformer":
            if any(s % 16 for s in self.sizes):
                raise UserError(f"sizes={list(self.sizes)} is invalid for the transformer; each d_model must be a "
                                "multiple of 16")
        elif ":" not in self.model:
            raise UserError(f"model={self.model!r} is invalid; allowed: transformer, or your own file.py:build with "
                            "--size-arg")
        elif not self.size_arg or self.input_shape is None:
            raise UserError(f"model={self.model!r} needs --size-arg (the argument that scales it) and --input-shape")


def _allowed(name: str, values: Any, allowed: tuple[str, ...]) -> None:
    bad = [v for v in values if v not in allowed]
    if bad:
        shown = repr(bad[0]) if name == "device" else bad
        raise UserError(f"{name}={shown} is invalid; allowed: {', '.join(allowed)}")


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

def measure_train(size: int, cfg: FrontierConfig, precision: str, checkpointing: bool) -> dict[str, Any]:
    """Peak bytes of one steady training step at `size`, its split (weights, gradients, optimizer, activations)
    and the phase that set it; raises what the step raised (an out-of-memory included).

    The two phases are measured apart: forward and backward (activations saved for backward, then gradients
    as backward makes them) and the optimizer step (every gradient held, and AdamW's temporaries). At small
    batches and large models the step's peak is the optimizer's, which neither precision nor checkpointing
    moves; the activations part is read from the forward/backward peak, so it still shows what they change."""
    import torch
    from torch import nn

    from trainserve.train.memory import optimizer_state_bytes, tensor_bytes

    device = torch.device(cfg.device)
    cuda = device.type == "cuda"
    if cuda:
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
    torch.manual_seed(0)
    with device:  # built where it runs: initialising billions of parameters on the host first takes minutes
        model = build_at(size, cfg)
    if checkpointing:
        apply_checkpointing(model)
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-4)
    inputs, labels = sample_inputs(cfg, cfg.batch_size, device)
    dtype = {"bf16": torch.bfloat16}.get(precision)

    def forward_backward() -> None:
        with torch.autocast(device.type, dtype=dtype, enabled=dtype is not None):
            logits = model(*inputs)
        nn.functional.cross_entropy(logits.float(), labels).backward()

    try:
        weights = tensor_bytes(params) + tensor_bytes(model.buffers())
        forward_backward()
        opt.step()  # the first step makes AdamW's state
        gradients = tensor_bytes(p.grad for p in params)
        optimizer = optimizer_state_bytes(opt)
        opt.zero_grad(set_to_none=True)
        fb, step = _phase_peaks(forward_backward, opt.step, cuda,
                                base + tensor_bytes((*inputs, labels)) if cuda else 0)
        opt.zero_grad(set_to_none=True)
    finally:
        del model, opt, params
    # at forward/backward's start weights and optimizer state are held (gradients freed); at the step's, all three
    fb_total = fb if cuda else weights + optimizer + fb
    step_total = step if cuda else weights + optimizer + gradients + step
    held = weights + gradients + optimizer
    return {"peak_bytes": int(max(fb_total, step_total)), "weights_bytes": int(weights),
            "gradients_bytes": int(gradients), "optimizer_bytes": int(optimizer),
            "activations_bytes": int(max(0, fb_total - held)), "step_temporaries_bytes": int(max(0, step_total - held)),
            "peak_phase": PHASE_FB if fb_total >= step_total else PHASE_STEP}


def _phase_peaks(forward_backward: Callable[[], None], step: Callable[[], Any], cuda: bool,
                 base: int) -> tuple[int, int]:
    """(forward/backward's peak, the optimizer step's peak) in bytes: on CUDA the allocator's high-water mark
    above `base`, each phase on its own; on the CPU the most the allocator held above the phase's start."""
    if cuda:
        import torch

        out = []
        for fn in (forward_backward, step):
            torch.cuda.reset_peak_memory_stats()
            fn()
            torch.cuda.synchronize()
            out.append(torch.cuda.max_memory_allocated() - base)
        return out[0], out[1]
    from trainserve.train.memory import cpu_step_peak_bytes

    _, fb = cpu_step_peak_bytes(forward_backward)
    if fb is None:
        raise RuntimeError("torch's profiler recorded no CPU allocation during forward and backward")
    _, st = cpu_step_peak_bytes(step)
    return fb, st or 0  # an optimizer that updates in place allocates nothing


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
                   feats: Callable[[int], tuple[int, int]], below: int | None = None,
                   limit_params: int | None = None) -> tuple[int, int, int]:
    """(size, params, predicted bytes) of the largest candidate predicted to fit (bisection: bytes grow with size),
    among the sizes within MAX_EXTRAPOLATION of the largest measured one, below `below` (a size that did not fit)
    and at most `limit_params` parameters."""
    limit = MAX_EXTRAPOLATION * feats(largest_fit)[0]
    if limit_params is not None:
        limit = min(limit, limit_params)
    cands = [c for c in edge_candidates(cfg, largest_fit) if below is None or c < below] or [largest_fit]

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


def fit_of(result: FrontierResult, series: str) -> SeriesFit | None:
    return next((f for f in result.fits if f.series == series), None)


def gib(n: float | None) -> str:
    return "-" if n is None else f"{n / GIB:.3g} GiB"


def millions(n: int | None) -> str:
    return "-" if n is None else f"{n / 1e6:.3g} M" if n >= 1e5 else f"{n / 1e6:.2g} M"

