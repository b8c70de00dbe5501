"""A one-model repository for load tests: 'tiny_cpu', input FP32 (B, 4) -> logits FP32 (B, 3), built with onnx.helper."""

from __future__ import annotations

from pathlib import Path

import numpy as np

MODEL = "tiny_cpu"
WEIGHT = np.arange(12, dtype=np.float32).reshape(4, 3) / 10.0  # (4, 3)
BIAS = np.array([0.5, -0.5, 1.0], dtype=np.float32)  # (3,)


def expected_logits(x: np.ndarray) -> np.ndarray:
    return x @ WEIGHT + BIAS


def build_repository(root: Path) -> Path:
    """root/tiny_cpu/{config.pbtxt, 1/model.onnx}; returns root."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    graph = helper.make_graph(
        [helper.make_node("MatMul", ["input", "W"], ["mm"]), helper.make_node("Add", ["mm", "b"], ["logits"])],
        "tiny",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 3])],
        [numpy_helper.from_array(WEIGHT, "W"), numpy_helper.from_array(BIAS, "b")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    (root / MODEL / "1").mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(root / MODEL / "1" / "model.onnx"))
    (root / MODEL / "config.pbtxt").write_text(
        f'name: "{MODEL}"\nplatform: "onnxruntime_onnx"\nmax_batch_size: 16\n'
        'input [ { name: "input" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
        'output [ { name: "logits" data_type: TYPE_FP32 dims: [ 3 ] } ]\n'
        "instance_group [ { count: 1 kind: KIND_CPU } ]\n"
        "dynamic_batching { max_queue_delay_microseconds: 0 }\n"
    )
    return root
