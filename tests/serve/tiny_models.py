"""Tiny ONNX models and config.pbtxt files for the server tests, built with onnx.helper (no torch)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

FEATURES = 4
CLASSES = 3
WEIGHT = np.arange(FEATURES * CLASSES, dtype=np.float32).reshape(FEATURES, CLASSES) / 10.0
BIAS = np.array([0.5, -0.5, 1.0], dtype=np.float32)


def expected_logits(x: np.ndarray) -> np.ndarray:
    """What the classifier computes: x @ W + b, (B, 4) -> (B, 3)."""
    return x @ WEIGHT + BIAS


def _save(model, path: Path) -> None:
    import onnx

    path.parent.mkdir(parents=True, exist_ok=True)
    model.ir_version = 8  # readable by any recent onnxruntime
    onnx.save(model, str(path))


def classifier_onnx(path: Path) -> None:
    """MatMul + Add: input FP32 (B, 4) -> logits FP32 (B, 3), dynamic batch; also 'probs' = softmax."""
    from onnx import TensorProto, helper, numpy_helper

    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["input", "W"], ["mm"]),
            helper.make_node("Add", ["mm", "b"], ["logits"]),
            helper.make_node("Softmax", ["logits"], ["probs"], axis=1),
        ],
        "classifier",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["batch", FEATURES])],
        [
            helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", CLASSES]),
            helper.make_tensor_value_info("probs", TensorProto.FLOAT, ["batch", CLASSES]),
        ],
        [numpy_helper.from_array(WEIGHT, "W"), numpy_helper.from_array(BIAS, "b")],
    )
    _save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


def int64_onnx(path: Path) -> None:
    """input_ids INT64 (B, S) -> logits FP32 (B, S): Cast to float and double it; S is dynamic."""
    from onnx import TensorProto, helper, numpy_helper

    graph = helper.make_graph(
        [helper.make_node("Cast", ["input_ids"], ["f"], to=TensorProto.FLOAT), helper.make_node("Mul", ["f", "two"], ["logits"])],
        "ints",
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "seq"])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", "seq"])],
        [numpy_helper.from_array(np.array(2.0, dtype=np.float32), "two")],
    )
    _save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


def string_onnx(path: Path) -> None:
    """text BYTES (B, 1) -> text_out BYTES (B, 1): Identity on strings."""
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Identity", ["text"], ["text_out"])],
        "strings",
        [helper.make_tensor_value_info("text", TensorProto.STRING, ["batch", 1])],
        [helper.make_tensor_value_info("text_out", TensorProto.STRING, ["batch", 1])],
    )
    _save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


def classifier_config(name: str, max_batch_size: int = 8, delay_us: int = 0, preferred: tuple[int, ...] = (), instances: int = 1) -> str:
    pref = f"  preferred_batch_size: [{', '.join(map(str, preferred))}]\n" if preferred else ""
    return (
        f'name: "{name}"\nplatform: "onnxruntime_onnx"\nmax_batch_size: {max_batch_size}\n'
        f'input [ {{ name: "input" data_type: TYPE_FP32 dims: [ {FEATURES} ] }} ]\n'
        f'output [ {{ name: "logits" data_type: TYPE_FP32 dims: [ {CLASSES} ] }}, '
        f'{{ name: "probs" data_type: TYPE_FP32 dims: [ {CLASSES} ] }} ]\n'
        f"instance_group [ {{ count: {instances} kind: KIND_CPU }} ]\n"
        f"dynamic_batching {{\n{pref}  max_queue_delay_microseconds: {delay_us}\n}}\n"
        'parameters { key: "intra_op_thread_count" value: { string_value: "1" } }\n'
    )


def make_repository(repo: Path, classifier_delay_us: int = 2000) -> Path:
    """A repository: 'classifier' (config.pbtxt, 2 versions), 'ints' (no config.pbtxt), 'strings', 'broken'."""
    classifier_onnx(repo / "classifier" / "1" / "model.onnx")
    classifier_onnx(repo / "classifier" / "2" / "model.onnx")
    (repo / "classifier" / "config.pbtxt").write_text(
        classifier_config("classifier", delay_us=classifier_delay_us)
        + "version_policy: { all: {} }\n"
    )
    int64_onnx(repo / "ints" / "1" / "model.onnx")
    string_onnx(repo / "strings" / "1" / "model.onnx")
    (repo / "broken" / "1").mkdir(parents=True)
    (repo / "broken" / "1" / "model.onnx").write_bytes(b"this is not an onnx model")
    (repo / "broken" / "config.pbtxt").write_text(
        'name: "broken"\nplatform: "onnxruntime_onnx"\nmax_batch_size: 4\n'
        'input [ { name: "input" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
        'output [ { name: "logits" data_type: TYPE_FP32 dims: [ 3 ] } ]\n'
    )
    return repo
