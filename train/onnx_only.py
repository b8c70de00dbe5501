"""A model trained elsewhere, as an ONNX file: its model card read from the graph, and a check that it runs.

`trainserve run --onnx model.onnx` skips training: the card (family "onnx") comes from the file's
inputs and outputs, which must keep the batch as their first, dynamic dimension (the server batches
requests along it) and fix every other one. The file is run once under onnxruntime on two samples
before anything is served, so a file that cannot be served fails in one sentence up front.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Any

from trainserve.core.card import ModelCard, TensorSpec
from trainserve.core.errors import UserError

FAMILY = "onnx"


def onnx_model_name(path: Path) -> str:
    """The served name: the file's stem made repository-safe ("resnet-50.onnx" -> "resnet_50")."""
    name = re.sub(r"[^A-Za-z0-9_]", "_", Path(path).stem).strip("_") or "model"
    return name if name[0].isalpha() else f"m_{name}"


def card_from_onnx(path: Path) -> ModelCard:
    """The model card of an ONNX classifier: inputs and outputs from the graph, one batch run to check it."""
    import onnx
    from onnx import helper

    path = Path(path).expanduser().resolve()
    if not path.is_file():
        raise UserError(f"--onnx {path} does not exist; give the path of the .onnx file to serve")
    try:
        proto = onnx.load(str(path), load_external_data=False)
    except Exception as e:  # onnx raises DecodeError, OSError, ... for a file that is not a model
        raise UserError(f"--onnx {path} is not a readable ONNX model ({type(e).__name__}); export it with "
                        "torch.onnx.export or your framework's ONNX exporter") from None
    initializers = {t.name for t in proto.graph.initializer}

    def specs(values: Any, what: str) -> list[TensorSpec]:
        out = []
        for v in values:
            if v.name in initializers:
                continue
            tt = v.type.tensor_type
            dims = list(tt.shape.dim)
            if not dims:
                raise UserError(f"{path}: {what} {v.name!r} has no shape; export it with a batch dimension first")
            if dims[0].HasField("dim_value"):
                raise UserError(f"{path}: {what} {v.name!r} has a fixed batch dimension of {dims[0].dim_value}; "
                                "the server batches requests along the first dimension, so re-export it with a "
                                "dynamic one (torch.onnx.export: dynamic_shapes or dynamic_axes={name: {0: 'batch'}})")
            shape = [d.dim_value if d.HasField("dim_value") else -1 for d in dims[1:]]
            if any(d < 1 for d in shape):
                raise UserError(f"{path}: {what} {v.name!r} has a dynamic dimension besides the batch "
                                f"({_dims_text(dims)}); re-export it with every other dimension fixed")
            try:
                dtype = helper.tensor_dtype_to_np_dtype(tt.elem_type).name
            except (KeyError, TypeError, ValueError):
                raise UserError(f"{path}: {what} {v.name!r} has ONNX element type {tt.elem_type}, which cannot be "
                                "served; use float32 or int64 inputs") from None
            out.append(TensorSpec(v.name, shape, dtype))
        return out

    inputs, outputs = specs(proto.graph.input, "input"), specs(proto.graph.output, "output")
    if not inputs or not outputs:
        raise UserError(f"{path} has {len(inputs)} inputs and {len(outputs)} outputs; it needs at least one of each")
    k = outputs[0].shape[-1] if len(outputs[0].shape) == 1 else None
    if k is None:
        dims = ", ".join(map(str, outputs[0].shape))
        raise UserError(f"{path}: output {outputs[0].name!r} has shape (batch, {dims}); serve a classifier whose "
                        "first output is (batch, K) logits")
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    card = ModelCard(family=FAMILY, preset=None,
                     config={"file": str(path), "sha256": digest, "name": onnx_model_name(path)},
                     inputs=inputs, outputs=outputs, classes=[str(i) for i in range(k)],
                     dataset="none: trained elsewhere", data={"source": "none"},
                     parameters=sum(_numel(t) for t in proto.graph.initializer))
    _run_once(path, card)
    return card


def _run_once(path: Path, card: ModelCard) -> None:
    """Two random samples through onnxruntime on the CPU; the first output must come back (2, K)."""
    import onnxruntime as ort

    from trainserve.core.card import example_inputs

    try:
        session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        out = session.run([card.outputs[0].name], example_inputs(card, 2))[0]
    except Exception as e:  # onnxruntime's errors have many types; any means "cannot be served"
        text = " ".join(str(e).split())[:240]
        raise UserError(f"{path} does not run under onnxruntime on two samples ({type(e).__name__}: {text}); "
                        "check the file's inputs") from None
    if tuple(out.shape) != (2, len(card.classes)):
        raise UserError(f"{path}: a batch of 2 gave output shape {list(out.shape)}, not [2, {len(card.classes)}]; "
                        "serve a classifier whose first output is (batch, K) logits")


def _dims_text(dims: Any) -> str:
    return ", ".join(str(d.dim_value) if d.HasField("dim_value") else (d.dim_param or "?") for d in dims)


def _numel(tensor: Any) -> int:
    n = 1
    for d in tensor.dims:
        n *= int(d)
    return n
