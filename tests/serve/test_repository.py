"""serve/repository.py: configs generated from a card, and reading Triton-layout repositories."""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest
from google.protobuf import text_format
from onnx import TensorProto, helper
from tritonclient.grpc import model_config_pb2 as pb

from trainserve.serve.repository import (
    RepositoryConfig,
    config_text,
    list_models,
    model_config_from_card,
    model_path,
    read_model_config,
    write_repository,
)
from trainserve.core.card import ModelCard, TensorSpec
from trainserve.core.errors import UserError


def _relu_model(path: Path, batch: int | str, features: int = 4, dtype: int = TensorProto.FLOAT) -> Path:
    """A hand-made ONNX model y = Relu(x) with x, y of shape (batch, features)."""
    x = helper.make_tensor_value_info("x", dtype, [batch, features])
    y = helper.make_tensor_value_info("y", dtype, [batch, features])
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "relu", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))
    return path


def _card(family: str = "cnn") -> ModelCard:
    return ModelCard(family=family, preset="tiny", config={"widths": [8, 16], "blocks": [1, 1]},
                     inputs=[TensorSpec("input", [3, 32, 32], "float32")],
                     outputs=[TensorSpec("logits", [10], "float32")], classes=[str(i) for i in range(10)])


# --- generation ----------------------------------------------------------------------------------

def test_cpu_config_from_card_round_trips_through_text_format() -> None:
    cfg = RepositoryConfig(max_batch_size=32, preferred_batch_sizes=(4, 16), max_queue_delay_microseconds=250,
                           cpu_instances=2, cpu_threads=3)
    text = config_text(model_config_from_card(_card(), "cpu", cfg))
    c = text_format.Parse(text, pb.ModelConfig())
    assert c.name == "cnn_cpu" and c.platform == "onnxruntime_onnx" and c.max_batch_size == 32
    assert [(i.name, pb.DataType.Name(i.data_type), list(i.dims)) for i in c.input] == [("input", "TYPE_FP32", [3, 32, 32])]
    assert [(o.name, list(o.dims)) for o in c.output] == [("logits", [10])]
    assert list(c.dynamic_batching.preferred_batch_size) == [4, 16]
    assert c.dynamic_batching.max_queue_delay_microseconds == 250
    assert [(g.kind, g.count) for g in c.instance_group] == [(pb.ModelInstanceGroup.KIND_CPU, 2)]
    assert c.parameters["intra_op_thread_count"].string_value == "3"
    assert c.parameters["inter_op_thread_count"].string_value == "1"
    assert not c.HasField("optimization")
    # one instance and no --cpu-threads: the serving machine chooses its threads, not the exporting one
    auto = model_config_from_card(_card(), "cpu", RepositoryConfig())
    assert "intra_op_thread_count" not in auto.parameters and auto.parameters["inter_op_thread_count"].string_value == "1"


def test_gpu_config_has_tensorrt_block_only_when_asked() -> None:
    plain = model_config_from_card(_card(), "gpu", RepositoryConfig())
    assert [g.kind for g in plain.instance_group] == [pb.ModelInstanceGroup.KIND_GPU]
    assert not plain.HasField("optimization") and "intra_op_thread_count" not in plain.parameters
    assert plain.parameters["cudnn_conv_algo_search"].string_value == "1"  # heuristic: no search per new batch size
    assert list(plain.dynamic_batching.preferred_batch_size) == [16, 32, 64]
    trt = model_config_from_card(_card(), "gpu", RepositoryConfig(tensorrt=True, max_batch_size=8))
    parsed = text_format.Parse(config_text(trt), pb.ModelConfig())
    (acc,) = parsed.optimization.execution_accelerators.gpu_execution_accelerator
    assert acc.name == "tensorrt" and acc.parameters["precision_mode"] == "FP16"
    assert acc.parameters["trt_profile_max_shapes"] == "input:8x3x32x32"


def test_int64_inputs_map_to_type_int64() -> None:
    card = _card("transformer")
    card.inputs = [TensorSpec("input_ids", [32], "int64")]
    c = model_config_from_card(card, "cpu", RepositoryConfig())
    assert c.name == "transformer_cpu" and c.input[0].data_type == pb.TYPE_INT64


@pytest.mark.parametrize(("dtype", "expected"), [("bool", pb.TYPE_BOOL), ("uint16", pb.TYPE_UINT16),
                                                 ("float16", pb.TYPE_FP16), ("float64", pb.TYPE_FP64),
                                                 ("object", pb.TYPE_STRING), ("bfloat16", pb.TYPE_BF16)])
def test_card_dtypes_map_to_triton_types(dtype: str, expected: int) -> None:
    card = _card()
    card.inputs = [TensorSpec("input", [4], dtype)]
    assert model_config_from_card(card, "cpu", RepositoryConfig()).input[0].data_type == expected


@pytest.mark.parametrize("dtype", ["complex64", "float", "<U3", "not-a-dtype"])
def test_card_dtype_triton_cannot_serve_is_a_user_error_listing_the_allowed(dtype: str) -> None:
    card = _card()
    card.inputs = [TensorSpec("input", [4], dtype)]
    with pytest.raises(UserError, match=r"which Triton cannot serve; allowed: bool, uint8, .*float32, float64, "
                                        r"object, bfloat16$"):
        model_config_from_card(card, "cpu", RepositoryConfig())


@pytest.mark.parametrize("kwargs", [{"max_batch_size": 0}, {"preferred_batch_sizes": (128,)},
                                    {"cpu_instances": 0}, {"max_queue_delay_microseconds": -1}, {"cpu_variant": "fp16"},
                                    {"gpu_variant": "int8"}])
def test_repository_config_rejects_bad_values(kwargs: dict) -> None:
    with pytest.raises(UserError, match=next(iter(kwargs))):
        RepositoryConfig(**kwargs)


def test_write_repository_is_all_or_nothing(tmp_path: Path) -> None:
    onnx_file = _relu_model(tmp_path / "m.onnx", "batch")
    repo = tmp_path / "model_repository"
    config = model_config_from_card(_card(), "cpu", RepositoryConfig())
    write_repository(repo, [(config, onnx_file)])
    assert (repo / "cnn_cpu" / "1" / "model.onnx").read_bytes() == onnx_file.read_bytes()
    before = (repo / "cnn_cpu" / "config.pbtxt").read_text()
    with pytest.raises(FileNotFoundError):
        write_repository(repo, [(config, tmp_path / "missing.onnx")])
    assert (repo / "cnn_cpu" / "config.pbtxt").read_text() == before
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


# --- reading: auto-complete ----------------------------------------------------------------------

def test_auto_complete_dynamic_batch_dim(tmp_path: Path) -> None:
    _relu_model(tmp_path / "relu" / "1" / "model.onnx", "batch")
    c = read_model_config(tmp_path / "relu")
    assert c.name == "relu" and c.platform == "onnxruntime_onnx" and c.backend == "onnxruntime"
    assert c.max_batch_size == 4  # Triton's default-max-batch-size
    assert c.HasField("dynamic_batching")
    assert [(i.name, list(i.dims), i.data_type) for i in c.input] == [("x", [4], pb.TYPE_FP32)]
    assert [(o.name, list(o.dims)) for o in c.output] == [("y", [4])]
    assert c.version_policy.latest.num_versions == 1 and c.default_model_filename == "model.onnx"
    assert read_model_config(tmp_path / "relu", default_max_batch_size=16).max_batch_size == 16


def test_auto_complete_fixed_batch_dim_means_no_batching(tmp_path: Path) -> None:
    _relu_model(tmp_path / "fixed" / "1" / "model.onnx", 2, dtype=TensorProto.INT64)
    c = read_model_config(tmp_path / "fixed")
    assert c.max_batch_size == 0 and not c.HasField("dynamic_batching")
    assert [(i.name, list(i.dims), i.data_type) for i in c.input] == [("x", [2, 4], pb.TYPE_INT64)]


def test_partial_config_keeps_what_it_says(tmp_path: Path) -> None:
    _relu_model(tmp_path / "relu" / "1" / "model.onnx", "batch")
    (tmp_path / "relu" / "config.pbtxt").write_text('max_batch_size: 16\ninstance_group [{ kind: KIND_CPU count: 2 }]\n')
    c = read_model_config(tmp_path / "relu")
    assert c.max_batch_size == 16 and c.instance_group[0].count == 2 and list(c.input[0].dims) == [4]


def test_batching_config_for_model_that_cannot_batch_is_rejected(tmp_path: Path) -> None:
    _relu_model(tmp_path / "fixed" / "1" / "model.onnx", 1)
    (tmp_path / "fixed" / "config.pbtxt").write_text("max_batch_size: 8\n")
    with pytest.raises(UserError, match="cannot batch"):
        read_model_config(tmp_path / "fixed")


def test_malformed_config_names_file_and_line(tmp_path: Path) -> None:
    _relu_model(tmp_path / "bad" / "1" / "model.onnx", "batch")
    (tmp_path / "bad" / "config.pbtxt").write_text('name: "bad"\nmax_batch_size: lots\n')
    with pytest.raises(UserError, match=r"config\.pbtxt:2:\d+: malformed"):
        read_model_config(tmp_path / "bad")


@pytest.mark.parametrize("text, match", [('name: "other"\n', "make them match"),
                                          ('platform: "tensorflow_savedmodel"\n', "only ONNX"),
                                          ("max_batch_size: -1\n", ">= 0")])
def test_inconsistent_configs_are_rejected(tmp_path: Path, text: str, match: str) -> None:
    _relu_model(tmp_path / "m" / "1" / "model.onnx", "batch")
    (tmp_path / "m" / "config.pbtxt").write_text(text)
    with pytest.raises(UserError, match=match):
        read_model_config(tmp_path / "m")


def test_missing_model_file_and_bad_onnx_are_user_errors(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(UserError, match="no version folder"):
        read_model_config(tmp_path / "empty")
    (tmp_path / "nofile" / "1").mkdir(parents=True)
    with pytest.raises(UserError, match="no model file"):
        read_model_config(tmp_path / "nofile")
    (tmp_path / "junk" / "1").mkdir(parents=True)
    (tmp_path / "junk" / "1" / "model.onnx").write_bytes(b"\x00not onnx at all\xff" * 4)
    with pytest.raises(UserError, match="not a readable ONNX model"):
        read_model_config(tmp_path / "junk")
    with pytest.raises(UserError, match="does not exist"):
        read_model_config(tmp_path / "nope")


# --- reading: layout and version policy ----------------------------------------------------------

def test_list_models_follows_triton_layout_and_version_policy(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    for v in ("1", "3", "10", "07", "abc"):
        _relu_model(repo / "a" / v / "model.onnx", "batch")
    _relu_model(repo / "b" / "2" / "model.onnx", "batch")
    _relu_model(repo / "b" / "5" / "model.onnx", "batch")
    (repo / "b" / "config.pbtxt").write_text("version_policy { all {} }\n")
    _relu_model(repo / "c" / "1" / "model.onnx", "batch")
    _relu_model(repo / "c" / "2" / "model.onnx", "batch")
    (repo / "c" / "config.pbtxt").write_text("version_policy { specific { versions: [1] } }\n")
    (repo / ".staging.tmp").mkdir()
    (repo / "README").write_text("not a model")
    models = list_models(repo)
    assert [(m.name, m.versions) for m in models] == [("a", [10]), ("b", [2, 5]), ("c", [1])]
    name, model_dir, versions = models[0]
    assert model_dir == repo / "a" and model_path(model_dir, versions[-1], read_model_config(model_dir)).is_file()
    (repo / "c" / "config.pbtxt").write_text("version_policy { specific { versions: [4] } }\n")
    with pytest.raises(UserError, match=r"versions \[4\]"):
        list_models(repo)
    with pytest.raises(UserError, match="does not exist"):
        list_models(tmp_path / "nowhere")


def test_generated_repository_reads_back_unchanged(tmp_path: Path) -> None:
    onnx_file = _relu_model(tmp_path / "m.onnx", "batch")
    config = model_config_from_card(_card(), "cpu", RepositoryConfig(max_batch_size=8))
    repo = write_repository(tmp_path / "repo", [(config, onnx_file)])
    assert [(m.name, m.versions) for m in list_models(repo)] == [("cnn_cpu", [1])]
    back = read_model_config(repo / "cnn_cpu", auto_complete=False)
    assert back.max_batch_size == 8 and back.input[0].name == "input" and back.backend == "onnxruntime"
