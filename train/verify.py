"""Verify exported ONNX models against the PyTorch model they came from, and measure their accuracy.

Error definitions (per output tensor, over the whole batch):
- max_abs = max |onnx - torch|
- max_rel = max |onnx - torch| / max |torch|: the error relative to the output's own scale. (An
  element-wise |a-b|/|b| explodes on logits near zero and says nothing about the prediction.)

Tolerances on max_rel, and why:
- fp32 1e-4: the same math in the same precision; only kernel and summation order differ (measured
  ~1e-7 on the zoo).
- fp16 1e-2: fp16 rounds each result to 2^-11 ~ 4.9e-4 relative, and the error grows with depth
  (measured 1.5e-4..3e-4 on the tiny zoo); 1e-2 still catches a broken conversion (errors ~1).
- int8 5e-2: 8-bit (7-bit with reduce_range) weights and per-batch activation ranges give ~1% per
  layer (measured 0.5%..1.4% on the tiny zoo); the accuracy delta on the evaluation set is the
  number that matters for int8, and it is reported beside.

Every variant runs on onnxruntime's CPU provider (fp16 too: the CUDA provider is not available
where exports are made); the provider actually used is recorded.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import numpy as np

from trainserve.core.card import ModelCard, example_inputs
from trainserve.core.errors import UserError
from trainserve.train.data import eval_arrays

log = logging.getLogger(__name__)

TOLERANCE_REL = {"fp32": 1e-4, "fp16": 1e-2, "int8": 5e-2}
PROVIDER = "CPUExecutionProvider"
VERIFY_SCHEMA_VERSION = 1
EVAL_BATCH = 256  # samples per onnxruntime call when measuring accuracy


def cpu_session(path: Path) -> Any:
    """An onnxruntime session on the CPU provider, failing loudly if another provider was used."""
    return ort_session(path, PROVIDER)


def ort_session(path: Path, provider: str) -> Any:
    """An onnxruntime session on `provider` only; a UserError if onnxruntime fell back to another one."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.log_severity_level = 3  # errors only: fp16 models log a warning per Cast fallback
    try:
        session = ort.InferenceSession(str(path), opts, providers=[provider])
    except Exception as e:  # onnxruntime raises its own Fail / InvalidGraph / NotImplemented types
        raise UserError(f"onnxruntime cannot load {path} on {provider} ({type(e).__name__}: "
                        f"{str(e).strip().splitlines()[0][:300]}); re-export with another --opset") from None
    if session.get_providers()[0] != provider:
        raise UserError(f"onnxruntime used {session.get_providers()} instead of {provider} for {path}; "
                        "check that its libraries (CUDA, cuDNN) are installed")
    return session


def torch_outputs(model: Any, inputs: dict[str, np.ndarray], card: ModelCard) -> dict[str, np.ndarray]:
    import torch

    with torch.no_grad():
        out = model(*(torch.from_numpy(inputs[t.name]) for t in card.inputs))
    outs = out if isinstance(out, (tuple, list)) else (out,)
    return {t.name: o.detach().float().numpy() for t, o in zip(card.outputs, outs)}


def compare(got: dict[str, np.ndarray], want: dict[str, np.ndarray]) -> dict[str, dict[str, float]]:
    """max_abs and max_rel (see the module docstring) per output."""
    result = {}
    for name, ref in want.items():
        diff = np.abs(got[name].astype(np.float64) - ref.astype(np.float64))
        if diff.shape != ref.shape:
            raise UserError(f"output {name!r} has shape {list(got[name].shape)}, expected {list(ref.shape)}")
        scale = float(np.abs(ref).max()) if ref.size else 0.0
        max_abs = float(diff.max()) if diff.size else 0.0
        result[name] = {"max_abs": max_abs, "max_rel": max_abs / max(scale, np.finfo(np.float32).tiny),
                        "ref_max_abs": scale}
    return result


def eval_set(model: Any, card: ModelCard, limit: int, seed: int) -> tuple[np.ndarray, np.ndarray, str]:
    """(inputs, labels, source): the card's evaluation data, or random inputs labelled by fp32 PyTorch."""
    try:
        x, y = eval_arrays(card, limit)
        return x, np.asarray(y, dtype=np.int64), "eval_arrays"
    except UserError as e:
        why = str(e)
    log.warning("no evaluation data (%s); using random inputs labelled by the fp32 PyTorch model", why)
    inputs = example_inputs(card, limit, seed=seed + 1)
    (logits,) = torch_outputs(model, inputs, card).values()
    return inputs[card.inputs[0].name], logits.argmax(axis=1).astype(np.int64), f"random inputs, fp32 argmax labels ({why})"


def accuracy(session: Any, card: ModelCard, x: np.ndarray, y: np.ndarray) -> float:
    name, out = card.inputs[0].name, card.outputs[0].name
    correct = 0
    for i in range(0, len(x), EVAL_BATCH):
        (logits,) = session.run([out], {name: x[i:i + EVAL_BATCH]})
        correct += int((logits.argmax(axis=1) == y[i:i + EVAL_BATCH]).sum())
    return correct / max(len(x), 1)


def verify_variants(model: Any, card: ModelCard, files: dict[str, Path], batches: tuple[int, ...] = (1, 64),
                    eval_limit: int = 1024, seed: int = 0,
                    tolerances: dict[str, float] | None = None) -> dict[str, Any]:
    """Compare each ONNX variant with PyTorch at each batch size and measure its accuracy (verify.json)."""
    import onnxruntime as ort

    tol = {**TOLERANCE_REL, **(tolerances or {})}
    refs = {}
    for b in batches:
        inputs = example_inputs(card, b, seed=seed + b)
        refs[b] = (inputs, torch_outputs(model, inputs, card))
    x_eval, y_eval, source = eval_set(model, card, eval_limit, seed)
    report: dict[str, Any] = {
        "schema_version": VERIFY_SCHEMA_VERSION, "model": card.name, "onnxruntime": ort.__version__,
        "seed": seed, "relative_error": "max|onnx - torch| / max|torch| per output over the batch",
        "eval": {"source": source, "samples": int(len(x_eval))}, "variants": {}}
    for variant, path in files.items():
        session = cpu_session(path)
        t0 = time.perf_counter()
        rows = []
        for b, (inputs, want) in refs.items():
            got = dict(zip([o.name for o in session.get_outputs()], session.run(None, inputs)))
            rows.append({"batch": b, "outputs": compare(got, want)})
        acc = accuracy(session, card, x_eval, y_eval)
        worst = max(e["max_rel"] for r in rows for e in r["outputs"].values())
        report["variants"][variant] = {
            "file": Path(path).name, "provider": session.get_providers()[0], "tolerance_rel": tol[variant],
            "max_abs": max(e["max_abs"] for r in rows for e in r["outputs"].values()), "max_rel": worst,
            "passed": worst <= tol[variant], "batches": rows, "accuracy": acc,
            "seconds": round(time.perf_counter() - t0, 3)}
        log.info("%s: max relative error %.3g (tolerance %g), accuracy %.4f", variant, worst, tol[variant], acc)
    base = report["variants"].get("fp32", {}).get("accuracy")
    for r in report["variants"].values():
        r["accuracy_delta"] = None if base is None else r["accuracy"] - base
    report["passed"] = all(r["passed"] for r in report["variants"].values())
    return report
