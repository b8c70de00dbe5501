"""ONNX export of a trained model, its fp16 (GPU) and int8 (CPU) variants, and the whole export stage.

`export_run` is the stage: checkpoint + model card -> runs/R/export/{model.onnx, model.fp16.onnx,
model.int8.onnx, export.json, verify.json}; only when verification passes does trainserve.publish write
runs/R/model_repository/<family>_{cpu,gpu}/ from the result. Each file is written atomically; the export folder and
the repository are each swapped in whole, so a failure never leaves a partial one.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from trainserve.core import diskfull
from trainserve.core.card import CARD_NAME, CHECKPOINT_NAME, ModelCard, example_inputs
from trainserve.core.errors import UserError
from trainserve.core.fsutil import staged_dir, write_json_atomic
from trainserve.train.models import build_model, config_from_dict
from trainserve.train.verify import verify_variants

log = logging.getLogger(__name__)

FP32_FILE, FP16_FILE, INT8_FILE = "model.onnx", "model.fp16.onnx", "model.int8.onnx"
EXPORT_SCHEMA_VERSION = 1
INT8_OP_TYPES = ("MatMul", "Gemm")  # see make_int8: Conv stays fp32
EXAMPLE_BATCH = 2  # torch.export specialises batch sizes 0 and 1, so trace with 2


@dataclass
class ExportConfig:
    """What `trainserve export` makes: ONNX opset, verification, and the repository's serving settings."""

    opset: int | None = None  # ONNX opset; None -> the exporter's default (recorded in export.json)
    verify_batches: tuple[int, ...] = (1, 64)  # batch sizes compared against PyTorch
    eval_limit: int = 1024  # evaluation samples used for the accuracy of each variant
    seed: int | None = None  # seed of the fresh random verification inputs; None -> random (recorded)

    def __post_init__(self) -> None:
        if self.opset is not None and not 7 <= self.opset <= 25:
            raise UserError(f"opset={self.opset} is invalid; allowed: 7..25 (or leave it unset)")
        self.verify_batches = tuple(int(b) for b in self.verify_batches)
        if not self.verify_batches or any(b < 1 for b in self.verify_batches):
            raise UserError(f"verify_batches={list(self.verify_batches)} is invalid; give one or more sizes >= 1")
        if self.eval_limit < 1:
            raise UserError(f"eval_limit={self.eval_limit} is invalid; allowed: >= 1")


# --- loading ---------------------------------------------------------------------------------------

def resolve_sources(run_folder: Path, checkpoint: Path | None, card: Path | None) -> tuple[Path, Path | None]:
    """(checkpoint, card) to export: the run's own, or the given ones (card None -> use the checkpoint's)."""
    if checkpoint is None and card is None:
        train_dir = run_folder / "train"
        return train_dir / CHECKPOINT_NAME, train_dir / CARD_NAME
    if checkpoint is None:
        card_obj = ModelCard.load(card)
        checkpoint = Path(card).parent / card_obj.checkpoint if Path(card).is_file() else Path(card) / card_obj.checkpoint
    if card is None and (Path(checkpoint).parent / CARD_NAME).is_file():
        card = Path(checkpoint).parent / CARD_NAME
    return Path(checkpoint), card


def load_model(checkpoint: Path, card_path: Path | None) -> tuple[Any, ModelCard, dict[str, Any]]:
    """The fp32 torch model (eval mode, CPU), its card, and the checkpoint's metadata (epoch, step)."""
    import pickle

    import torch


    checkpoint = Path(checkpoint)
    if not checkpoint.is_file():
        raise UserError(f"no checkpoint at {checkpoint}; train the run first (trainserve train) or pass --checkpoint")
    try:
        ckpt = torch.load(checkpoint, map_location="cpu", weights_only=True)
    except (pickle.UnpicklingError, RuntimeError, EOFError, OSError, ValueError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise UserError(f"{checkpoint} is not a loadable checkpoint ({first}); pass a checkpoint.pt written by "
                        "trainserve train") from None
    if not isinstance(ckpt, dict) or not isinstance(ckpt.get("model"), dict):
        raise UserError(f"{checkpoint} has no 'model' state_dict; pass a checkpoint.pt written by trainserve train")
    if card_path is not None:
        card = ModelCard.load(card_path)
        source = str(card_path)
    elif isinstance(ckpt.get("card"), dict):
        card = ModelCard.from_dict(ckpt["card"], source=f"model card inside {checkpoint}")
        source = f"the card inside {checkpoint}"
    else:
        raise UserError(f"{checkpoint} carries no model card and none was given; pass --card model.json")
    inner = ckpt.get("card")
    if card_path is not None and isinstance(inner, dict) and (inner.get("family"), inner.get("config")) != (
            card.family, card.config):
        raise UserError(f"checkpoint {checkpoint} was trained as {inner.get('family')} {inner.get('config')} but "
                        f"card {card_path} describes {card.family} {card.config}; pass the card of that checkpoint")
    model = build_model(config_from_dict(card.family, card.config))
    try:
        model.load_state_dict(ckpt["model"], strict=True)
    except RuntimeError as e:
        detail = " ".join(str(e).split())[:300]
        raise UserError(f"checkpoint {checkpoint} does not match {source} ({detail}); pass the card the checkpoint "
                        "was trained with") from None
    model.eval()
    meta = {k: ckpt[k] for k in ("epoch", "step") if k in ckpt}
    return model, card, meta


# --- export ------------------------------------------------------------------------------------------

def _export_dynamo(model: Any, args: tuple, card: ModelCard, path: Path, opset: int | None) -> None:
    import torch

    batch = torch.export.Dim("batch")
    with _quiet("torch.onnx", "torch.export", "onnxscript", "onnx_ir"), warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # torch's own deprecations inside the exporter
        torch.onnx.export(model, args, str(path), dynamo=True, external_data=False, verbose=False,
                          input_names=[t.name for t in card.inputs], output_names=[t.name for t in card.outputs],
                          dynamic_shapes=tuple({0: batch} for _ in card.inputs), opset_version=opset)


def _export_torchscript(model: Any, args: tuple, card: ModelCard, path: Path, opset: int | None) -> None:
    import torch

    axes = {t.name: {0: "batch"} for t in [*card.inputs, *card.outputs]}
    with _quiet("torch.onnx"), warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # the TorchScript exporter is deprecated; it is the fallback
        torch.onnx.export(model, args, str(path), dynamo=False, input_names=[t.name for t in card.inputs],
                          output_names=[t.name for t in card.outputs], dynamic_axes=axes,
                          opset_version=opset or 17)


def export_onnx(model: Any, card: ModelCard, path: Path, opset: int | None = None) -> dict[str, Any]:
    """Export to one self-contained ONNX file with a dynamic batch dimension; returns how it was made.

    The dynamo exporter is tried first; if it raises, the TorchScript exporter is used and the reason
    is logged and returned ("fallback_reason").
    """
    import onnx
    import torch

    args = tuple(torch.from_numpy(a) for a in example_inputs(card, EXAMPLE_BATCH).values())
    t0 = time.perf_counter()
    exporter, reason = "dynamo", None
    try:
        _export_dynamo(model, args, card, path, opset)
    except Exception as e:  # the exporter raises many kinds; any of them means "try the other one"
        if diskfull.disk_full_error(e) is not None:
            raise  # the other exporter would fail the same way (or, worse, write half a file silently)
        reason = f"{type(e).__name__}: {_first_line(e)}"
        log.warning("dynamo ONNX export failed (%s); falling back to the TorchScript exporter", reason)
        exporter = "torchscript"
        try:
            with _quiet_output():  # on failure it prints its whole graph from C++
                _export_torchscript(model, args, card, path, opset)
        except Exception as e2:
            if diskfull.disk_full_error(e2) is not None:
                raise
            op = refused_operator(str(e2), str(e))
            if op:
                raise UserError(f"the ONNX exporters cannot convert the operator {op} that the model uses "
                                f"(torchscript: {_first_line(e2)}); replace it with operations ONNX has, or try "
                                "another --opset") from None
            raise UserError(f"ONNX export failed with both exporters (dynamo: {reason}; torchscript: "
                            f"{type(e2).__name__}: {_first_line(e2)}); try another --opset") from None
    try:
        with diskfull.blames_a_full_disk(path):  # the exporter may have written a truncated file without a word
            proto = onnx.load(str(path))
    except OSError:
        raise
    except Exception as e:
        raise UserError(f"the exported ONNX file {path} cannot be read back ({type(e).__name__}: {_first_line(e)}); "
                        "export again") from None
    try:
        onnx.checker.check_model(proto)
    except onnx.checker.ValidationError as e:
        raise UserError(f"the exported ONNX model is invalid ({_first_line(e)}); try another --opset") from None
    _check_signature(proto, card)
    return {"exporter": exporter, "fallback_reason": reason, "opset": _opset(proto),
            "seconds": round(time.perf_counter() - t0, 3), "torch": torch.__version__, "onnx": onnx.__version__}


def refused_operator(*messages: str) -> str | None:
    """The operator an exporter refused, from its message: "Exporting the operator 'aten::cummax' ..."
    (TorchScript) or "No ONNX function found for <OpOverload(op='aten.cummax', ...)>" (dynamo)."""
    for text in messages:
        found = re.search(r"operator '([\w:.]+)'", text) or re.search(r"op='([\w:.]+)'", text)
        if found:
            return found.group(1)
    return None


def _check_signature(proto: Any, card: ModelCard) -> None:
    """The file's I/O names are the card's, and every batch dimension is symbolic."""
    inputs = [i for i in proto.graph.input if i.name not in {t.name for t in proto.graph.initializer}]
    got = ([i.name for i in inputs], [o.name for o in proto.graph.output])
    want = ([t.name for t in card.inputs], [t.name for t in card.outputs])
    if got != want:
        raise UserError(f"exported ONNX I/O names {got} differ from the model card's {want}; re-export")
    for v in [*inputs, *proto.graph.output]:
        dim0 = v.type.tensor_type.shape.dim[0]
        if dim0.HasField("dim_value"):
            raise UserError(f"exported tensor {v.name!r} has a fixed batch dimension {dim0.dim_value}; "
                            "the exporter did not keep it dynamic, try another --opset")


def _opset(proto: Any) -> int:
    return next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), 0)


def make_fp16(src: Path, dst: Path) -> dict[str, Any]:
    """fp16 weights and compute for GPU serving, with fp32 inputs and outputs (clients stay unchanged)."""
    import onnx
    from onnxruntime.transformers.float16 import convert_float_to_float16

    model = convert_float_to_float16(onnx.load(str(src)), keep_io_types=True)
    with diskfull.blames_a_full_disk(dst):
        onnx.save(model, str(dst))
    return {"tool": "onnxruntime.transformers.float16.convert_float_to_float16", "keep_io_types": True}


def make_int8(src: Path, dst: Path) -> dict[str, Any]:
    """int8 dynamic quantization for CPU serving (weights int8 ahead of time, activations per batch).

    Weights are QInt8 with reduce_range (7-bit): uint8 activations times full-range int8 weights can
    saturate the 16-bit intermediate of x86 AVX2/AVX-512 (non-VNNI) integer kernels, which measured as
    ~17% output error on the MLP versus ~1% with reduce_range. Only MatMul and Gemm are quantized
    (MatMulInteger): quantizing Conv too gives ConvInteger, which the CPU provider runs but ~10x
    slower than fp32 Conv (tiny CNN, batch 64: 300 ms vs 33 ms), so conv layers stay fp32.
    """
    import tempfile

    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    model = onnx.load(str(src))
    # The dynamo exporter records value_info shapes that the quantizer's shape inference rejects
    # ("Inferred shape and existing shape differ"); they are re-inferred anyway.
    del model.graph.value_info[:]
    with tempfile.TemporaryDirectory(dir=dst.parent) as tmp:
        plain = Path(tmp) / "plain.onnx"
        onnx.save(model, str(plain))
        with _quiet(""), diskfull.blames_a_full_disk(dst):  # _quiet: quantize_dynamic warns on the root logger
            quantize_dynamic(str(plain), str(dst), weight_type=QuantType.QInt8, reduce_range=True, per_channel=False,
                             op_types_to_quantize=list(INT8_OP_TYPES))
    return {"tool": "onnxruntime.quantization.quantize_dynamic", "weight_type": "QInt8", "reduce_range": True,
            "per_channel": False, "op_types": list(INT8_OP_TYPES)}


# --- the stage ---------------------------------------------------------------------------------------

@dataclass
class ExportResult:
    """What `export_run` produced (also the CLI's summary)."""

    run_dir: Path
    export_dir: Path
    repository: Path | None
    export: dict[str, Any]
    verify: dict[str, Any]
    files: dict[str, int] = field(default_factory=dict)  # variant -> bytes
    card: ModelCard | None = None

    def variant_file(self, variant: str) -> Path:
        """The exported ONNX file of one variant (fp32, fp16, int8)."""
        return self.export_dir / self.export["variants"][variant]["file"]


def export_run(run_folder: Path, checkpoint: Path, card_path: Path | None, cfg: ExportConfig,
               notes: dict[str, Any] | None = None,
               progress: Callable[[str], None] = lambda step: None) -> ExportResult:
    """Export, make the variants and verify them; the caller writes the model repository from the result.

    `notes` are recorded in export.json as they are (the publisher's repository settings). On a
    verification failure the export folder (with verify.json, "passed": false) is kept for
    inspection and a UserError is raised.
    """
    import secrets

    progress("loading checkpoint")
    model, card, meta = load_model(checkpoint, card_path)
    seed = cfg.seed if cfg.seed is not None else secrets.randbelow(2**31)
    export_dir = run_folder / "export"
    with staged_dir(export_dir) as stage:
        progress("exporting ONNX")
        info = export_onnx(model, card, stage / FP32_FILE, cfg.opset)
        progress("making fp16 variant")
        variants = {"fp32": {"file": FP32_FILE}, "fp16": {"file": FP16_FILE, **make_fp16(stage / FP32_FILE, stage / FP16_FILE)}}
        progress("making int8 variant")
        variants["int8"] = {"file": INT8_FILE, **make_int8(stage / FP32_FILE, stage / INT8_FILE)}
        files = {v: (stage / d["file"]).stat().st_size for v, d in variants.items()}
        for v, d in variants.items():
            d["bytes"] = files[v]
        progress("verifying against PyTorch")
        report = verify_variants(model, card, {v: stage / d["file"] for v, d in variants.items()},
                                 batches=cfg.verify_batches, eval_limit=cfg.eval_limit, seed=seed)
        export_info = {"schema_version": EXPORT_SCHEMA_VERSION, "model": card.name, "family": card.family,
                       "preset": card.preset, "checkpoint": str(checkpoint), "card": str(card_path or "(in checkpoint)"),
                       **meta, **info, "variants": variants, "config": _plain(asdict(cfg)),
                       **(notes or {})}
        write_json_atomic(stage / "export.json", export_info)
        write_json_atomic(stage / "verify.json", report)
    result = ExportResult(run_folder, export_dir, None, export_info, report, files, card)
    if not report["passed"]:
        failed = [f"{v} batch {b['batch']}: {o} relative error {e['max_rel']:.3g} > {report['variants'][v]['tolerance_rel']:g}"
                  for v, r in report["variants"].items() for b in r["batches"] for o, e in b["outputs"].items()
                  if e["max_rel"] > r["tolerance_rel"]]
        raise UserError(f"verification failed ({'; '.join(failed[:3])}); no model repository was written, "
                        f"see {export_dir / 'verify.json'}")
    return result


def _plain(d: dict[str, Any]) -> dict[str, Any]:
    return {k: list(v) if isinstance(v, tuple) else v for k, v in d.items()}


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return (text.splitlines()[0] if text else type(e).__name__)[:300]


@contextlib.contextmanager
def _quiet(*loggers: str) -> Iterator[None]:
    """Raise these loggers to ERROR for the duration (exporters and quantizers are chatty)."""
    saved = [(logging.getLogger(n), logging.getLogger(n).level) for n in loggers]
    for lg, _ in saved:
        lg.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for lg, level in saved:
            lg.setLevel(level)


@contextlib.contextmanager
def _quiet_output() -> Iterator[None]:
    """File descriptors 1 and 2 to a scratch file for the duration: the TorchScript exporter's C++ log
    writes its whole graph there on failure, past sys.stdout and sys.stderr."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    with tempfile.TemporaryFile() as scratch:
        os.dup2(scratch.fileno(), 1)
        os.dup2(scratch.fileno(), 2)
        try:
            yield
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            for fd, copy in zip((1, 2), saved):
                os.dup2(copy, fd)
                os.close(copy)
