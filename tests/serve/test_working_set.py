"""Inference's working set (serve/model/working_set.py): one fresh onnxruntime session's memory at each batch size
holds its weights and grows with the batch (the arena keeps the activations of the largest batch run)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort

from trainserve.serve.model.working_set import working_set_by_batch

IN, HIDDEN = 512, 4096  # weights: 512 x 4096 fp32 = 8 MiB; activations: 16 KiB per row


def _wide_onnx(path: Path) -> None:
    from onnx import TensorProto, helper, numpy_helper, save

    w = np.random.default_rng(0).standard_normal((IN, HIDDEN), dtype=np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["h"]), helper.make_node("Relu", ["h"], ["r"]),
         helper.make_node("ReduceSum", ["r"], ["y"], keepdims=1)],
        "wide", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", IN])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 1])], [numpy_helper.from_array(w, "W")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    save(model, str(path))


def test_working_set_holds_the_weights_and_grows_with_the_batch(tmp_path):
    path = tmp_path / "wide.onnx"
    _wide_onnx(path)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    feeds = {b: {"x": np.ones((b, IN), np.float32)} for b in (1, 1024)}
    ws = working_set_by_batch(lambda: ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"]),
                              feeds, "cpu")
    assert sorted(ws) == [1, 1024]
    weights = IN * HIDDEN * 4
    assert ws[1] >= 0.8 * weights  # the session holds its weights (allowing for pages shared with the file)
    # batch 1024: (1024, 4096) fp32 activations = 16 MiB more in the arena
    assert ws[1024] - ws[1] >= 0.5 * 1024 * HIDDEN * 4
