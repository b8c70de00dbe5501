"""Minimal model-repository reading for the server until serve/repository.py (export helper) lands.

Reads `config.pbtxt` into tritonclient's ModelConfig protobuf and fills what it leaves out (inputs,
outputs, batching) from the ONNX graph, the way Triton's auto-complete does.
"""

from __future__ import annotations

from pathlib import Path

from serve.errors import ServeError

DEFAULT_MAX_BATCH_SIZE = 4  # Triton's --backend-config=default-max-batch-size


class ConfigError(ServeError):
    """A model directory whose config cannot be read; the model is reported not ready with this message."""


def list_models(repo: Path) -> list[str]:
    """Model names in a repository: its subdirectories, sorted, hidden ones skipped."""
    return sorted(p.name for p in Path(repo).iterdir() if p.is_dir() and not p.name.startswith("."))


def _onnx_io(onnx_path: Path) -> tuple[list[tuple[str, str, list[int]]], list[tuple[str, str, list[int]]]]:
    """(name, TYPE_*, dims with -1 for dynamic) for the graph's inputs and outputs."""
    import onnx

    try:
        model = onnx.load(str(onnx_path), load_external_data=False)
    except Exception as e:  # protobuf DecodeError and friends: not an ONNX file
        raise ConfigError(f"cannot read the ONNX model {onnx_path} to complete its configuration: {e}") from None
    init_names = {i.name for i in model.graph.initializer}

    def describe(values) -> list[tuple[str, str, list[int]]]:
        out = []
        for v in values:
            if v.name in init_names:
                continue
            tt = v.type.tensor_type
            elem = onnx.helper.tensor_dtype_to_string(tt.elem_type).removeprefix("TensorProto.")
            type_name = {"FLOAT": "TYPE_FP32", "DOUBLE": "TYPE_FP64", "FLOAT16": "TYPE_FP16", "STRING": "TYPE_STRING"}.get(
                elem, f"TYPE_{elem}"
            )
            dims = [d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else -1 for d in tt.shape.dim]
            out.append((v.name, type_name, dims))
        return out

    return describe(model.graph.input), describe(model.graph.output)


def read_model_config(model_dir: Path):
    """The model's ModelConfig: config.pbtxt if present, completed from the newest version's model.onnx."""
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2

    model_dir = Path(model_dir)
    config = model_config_pb2.ModelConfig()
    pbtxt = model_dir / "config.pbtxt"
    if pbtxt.exists():
        try:
            text_format.Parse(pbtxt.read_text(), config)
        except text_format.ParseError as e:
            raise ConfigError(f"failed to parse {pbtxt}: {e}") from None
    if not config.name:
        config.name = model_dir.name
    if not config.platform and not config.backend:
        config.platform = "onnxruntime_onnx"
    if config.input and config.output:
        return config
    versions = sorted((int(p.name) for p in model_dir.iterdir() if p.is_dir() and p.name.isdigit()), reverse=True)
    filename = config.default_model_filename or "model.onnx"
    onnx_path = next((model_dir / str(v) / filename for v in versions if (model_dir / str(v) / filename).exists()), None)
    if onnx_path is None:
        raise ConfigError(f"no version directory with {filename} in {model_dir}")
    inputs, outputs = _onnx_io(onnx_path)
    batched = all(dims and dims[0] == -1 for _, _, dims in inputs + outputs)
    if not pbtxt.exists() or (config.max_batch_size == 0 and batched and not config.input):
        config.max_batch_size = DEFAULT_MAX_BATCH_SIZE if batched else 0
        if batched and not config.HasField("dynamic_batching"):
            config.dynamic_batching.SetInParent()
    strip = 1 if config.max_batch_size > 0 else 0
    if not config.input:
        for name, type_name, dims in inputs:
            config.input.add(name=name, data_type=model_config_pb2.DataType.Value(type_name), dims=dims[strip:])
    if not config.output:
        for name, type_name, dims in outputs:
            config.output.add(name=name, data_type=model_config_pb2.DataType.Value(type_name), dims=dims[strip:])
    return config
