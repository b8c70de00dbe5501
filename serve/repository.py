"""Triton model repositories: generate one from a model card, and read any Triton-layout ONNX repository.

Layout (Triton's): `<repo>/<model>/config.pbtxt` (optional) and `<repo>/<model>/<version>/model.onnx`,
versions being folders with a numeric name that does not start with 0. `config.pbtxt` is the text
form of tritonclient's `model_config_pb2.ModelConfig`; we generate it from the model card (never by
hand) and, when a model folder has none, derive it from the ONNX signature the way Triton's
onnxruntime backend auto-completes a configuration.

This module imports neither torch nor onnxruntime; `onnx` is imported only to read a signature.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

import numpy as np
from tritonclient.utils import np_to_triton_dtype, triton_to_np_dtype

from trainserve.serve.datatypes import config_to_kserve, kserve_to_config
from trainserve.core.bounds import NOBATCH_SUFFIX
from trainserve.core.errors import UserError
from trainserve.core.fsutil import staged_dir, write_text_atomic
from trainserve.core.options.serve import CPU_VARIANTS, GPU_VARIANTS, RepositoryOptions

if TYPE_CHECKING:
    from tritonclient.grpc import model_config_pb2

    from trainserve.core.card import ModelCard

log = logging.getLogger(__name__)

CONFIG_NAME = "config.pbtxt"
ONNX_PLATFORM = "onnxruntime_onnx"
ONNX_BACKEND = "onnxruntime"
DEFAULT_MODEL_FILENAME = "model.onnx"
# Triton's --backend-config=default-max-batch-size: the max_batch_size auto-complete gives a model
# whose signature batches (first dimension variable) when the configuration names none.
TRITON_DEFAULT_MAX_BATCH_SIZE = 4

# onnx.TensorProto.DataType name -> Triton data type name (the onnxruntime backend's mapping).
# Kept here because tritonclient maps numpy dtypes, not ONNX's, and onnx's own numpy mapping has
# changed for BFLOAT16 across releases (float32, then ml_dtypes.bfloat16).
ONNX_TO_TRITON = {
    "BOOL": "TYPE_BOOL", "UINT8": "TYPE_UINT8", "UINT16": "TYPE_UINT16", "UINT32": "TYPE_UINT32",
    "UINT64": "TYPE_UINT64", "INT8": "TYPE_INT8", "INT16": "TYPE_INT16", "INT32": "TYPE_INT32",
    "INT64": "TYPE_INT64", "FLOAT16": "TYPE_FP16", "FLOAT": "TYPE_FP32", "DOUBLE": "TYPE_FP64",
    "STRING": "TYPE_STRING", "BFLOAT16": "TYPE_BF16",
}


def _card_triton_type(dtype_name: str) -> str | None:
    """'float32' -> 'TYPE_FP32': a card's numpy dtype name as a Triton data type (tritonclient's
    mapping), or None where Triton has none. Only a dtype's own name is read ('float', an alias, is not).
    """
    try:
        dtype = np.dtype(dtype_name)
    except (TypeError, ValueError):
        return None
    datatype = np_to_triton_dtype(dtype)
    return kserve_to_config(datatype) if datatype is not None and dtype.name == dtype_name else None


def _card_dtype_names() -> list[str]:
    """The numpy dtype names _card_triton_type accepts, in model_config's DataType order."""
    names = [triton_to_np_dtype(config_to_kserve(n)) for n in _pb2().DataType.keys() if n != "TYPE_INVALID"]
    return [np.dtype(t).name for t in names if t is not None]


def _pb2():
    from tritonclient.grpc import model_config_pb2

    return model_config_pb2


# --- generating a repository from a model card --------------------------------------------------

@dataclass(kw_only=True)
class RepositoryConfig(RepositoryOptions):
    """How the generated `<family>_cpu` and `<family>_gpu` models are batched, placed and threaded:
    RepositoryOptions (trainserve/core/options/serve.py, named as Triton's model_config) plus its checks."""

    def __post_init__(self) -> None:
        self.preferred_batch_sizes = tuple(int(b) for b in self.preferred_batch_sizes)
        if not 1 <= self.max_batch_size <= 1 << 16:
            raise UserError(f"max_batch_size={self.max_batch_size} is invalid; allowed: 1..65536")
        bad = [b for b in self.preferred_batch_sizes if not 1 <= b <= self.max_batch_size]
        if bad:
            raise UserError(f"preferred_batch_sizes={list(self.preferred_batch_sizes)} is invalid; "
                            f"each must be between 1 and max_batch_size={self.max_batch_size}")
        if not 0 <= self.max_queue_delay_microseconds <= 10_000_000:
            raise UserError(f"max_queue_delay_microseconds={self.max_queue_delay_microseconds} is invalid; allowed: "
                            "0..10000000 (10 s)")
        for name in ("cpu_instances", "gpu_instances"):
            if not 1 <= getattr(self, name) <= 64:
                raise UserError(f"{name}={getattr(self, name)} is invalid; allowed: 1..64")
        if not 0 <= self.cpu_threads <= 1024:
            raise UserError(f"cpu_threads={self.cpu_threads} is invalid; allowed: 0 (auto) .. 1024")
        if self.cpu_variant not in CPU_VARIANTS:
            raise UserError(f"cpu_variant={self.cpu_variant!r} is invalid; allowed: {', '.join(CPU_VARIANTS)}")
        if self.gpu_variant not in GPU_VARIANTS:
            raise UserError(f"gpu_variant={self.gpu_variant!r} is invalid; allowed: {', '.join(GPU_VARIANTS)}")

    def batch_sizes(self) -> list[int]:
        """The preferred batch sizes written to dynamic_batching (ascending, unique)."""
        sizes = self.preferred_batch_sizes or (self.max_batch_size // 4, self.max_batch_size // 2, self.max_batch_size)
        return sorted({b for b in sizes if b >= 1})

    def intra_op_threads(self) -> int:
        """Threads per CPU instance: pinned, so instances do not oversubscribe the cores."""
        if self.cpu_threads:
            return self.cpu_threads
        return max(1, (os.cpu_count() or 1) // self.cpu_instances)


def model_config_from_card(card: ModelCard, kind: Literal["cpu", "gpu"],
                           cfg: RepositoryConfig) -> model_config_pb2.ModelConfig:
    """The Triton configuration of `<family>_<kind>`, built from the card's inputs and outputs.

    Inputs and outputs keep the card's dtypes (fp32 I/O even for the fp16 and int8 variants, whose
    converters keep fp32 at the model boundary), so clients send the same tensors to every model.
    """
    pb = _pb2()
    c = pb.ModelConfig(name=f"{card.name}_{kind}", platform=ONNX_PLATFORM, max_batch_size=cfg.max_batch_size)
    for spec, dest in [(t, c.input) for t in card.inputs] + [(t, c.output) for t in card.outputs]:
        triton_type = _card_triton_type(spec.dtype)
        if triton_type is None:
            raise UserError(f"model card tensor {spec.name!r} has dtype {spec.dtype!r}, which Triton cannot "
                            f"serve; allowed: {', '.join(_card_dtype_names())}")
        dest.add(name=spec.name, data_type=pb.DataType.Value(triton_type), dims=list(spec.shape))
    c.dynamic_batching.preferred_batch_size.extend(cfg.batch_sizes())
    c.dynamic_batching.max_queue_delay_microseconds = cfg.max_queue_delay_microseconds
    if kind == "cpu":
        c.instance_group.add(kind=pb.ModelInstanceGroup.KIND_CPU, count=cfg.cpu_instances)
        # Keys read by Triton's onnxruntime backend; inter-op 1 because execution is sequential. The intra-op
        # count is written only when asked or when instances must share the cores: otherwise the serving
        # machine decides (the embedded server times its thread layout at load, serve.model.tuning), not this one.
        if cfg.cpu_threads or cfg.cpu_instances > 1:
            c.parameters["intra_op_thread_count"].string_value = str(cfg.intra_op_threads())
        c.parameters["inter_op_thread_count"].string_value = "1"
    elif kind == "gpu":
        c.instance_group.add(kind=pb.ModelInstanceGroup.KIND_GPU, count=cfg.gpu_instances)
        # Triton's onnxruntime backend defaults to exhaustive cuDNN search (0), which benchmarks every new
        # batch shape the dynamic batcher forms (hundreds of ms each); 1 = cuDNN's heuristics.
        c.parameters["cudnn_conv_algo_search"].string_value = "1"
        if cfg.tensorrt:
            trt = c.optimization.execution_accelerators.gpu_execution_accelerator.add(name="tensorrt")
            trt.parameters["precision_mode"] = "FP16"
            trt.parameters["max_workspace_size_bytes"] = str(1 << 30)
            # One optimisation profile over the whole batch range, so TensorRT builds one engine.
            for key, batch in (("trt_profile_min_shapes", 1), ("trt_profile_opt_shapes", cfg.batch_sizes()[-1]),
                               ("trt_profile_max_shapes", cfg.max_batch_size)):
                trt.parameters[key] = ",".join(f"{t.name}:{'x'.join(str(d) for d in [batch, *t.shape])}"
                                               for t in card.inputs)
    else:
        raise ValueError(f"kind must be 'cpu' or 'gpu', not {kind!r}")
    return c


def nobatch_config(config: model_config_pb2.ModelConfig) -> model_config_pb2.ModelConfig:
    """The same model with batching off: `<name>_nobatch`, max_batch_size 1 and no dynamic_batching (so
    neither Triton's auto-complete nor ours adds a batcher back), the baseline dynamic batching is judged by."""
    pb = _pb2()
    c = pb.ModelConfig()
    c.CopyFrom(config)
    c.name = config.name + NOBATCH_SUFFIX
    c.max_batch_size = 1
    c.ClearField("dynamic_batching")
    return c


def config_text(config: model_config_pb2.ModelConfig) -> str:
    from google.protobuf import text_format

    return text_format.MessageToString(config)


def write_repository(repo_dir: Path, models: Sequence[tuple[model_config_pb2.ModelConfig, Path]]) -> Path:
    """Write `repo_dir/<config.name>/{config.pbtxt, 1/model.onnx}` for each (config, onnx file).

    All or nothing: the folder is built beside `repo_dir` and swapped in only when complete, so a
    failure leaves whatever was there before.
    """
    import shutil

    with staged_dir(Path(repo_dir)) as tmp:
        for config, onnx_path in models:
            model_dir = tmp / config.name
            (model_dir / "1").mkdir(parents=True)
            shutil.copyfile(onnx_path, model_dir / "1" / DEFAULT_MODEL_FILENAME)
            write_text_atomic(model_dir / CONFIG_NAME, config_text(config))
    return Path(repo_dir)


# --- reading any Triton-layout ONNX repository ---------------------------------------------------

class ModelEntry(NamedTuple):
    """One model of a repository: its name, folder, and the versions its version_policy serves."""

    name: str
    model_dir: Path
    versions: list[int]  # ascending


def list_models(repo: Path) -> list[ModelEntry]:
    """The models of a Triton-layout repository, sorted by name.

    Each sub-folder is a model (hidden ones, like staging folders, are skipped); its versions are the
    sub-folders named by a positive integer without a leading zero, filtered by config.pbtxt's
    version_policy (default: latest 1). A model with no version folder is listed with no versions.
    """
    repo = Path(repo)
    if not repo.is_dir():
        raise UserError(f"model repository {repo} does not exist; run trainserve export first or pass an existing folder")
    entries = []
    for model_dir in sorted(p for p in repo.iterdir() if p.is_dir() and not p.name.startswith(".")):
        on_disk = version_folders(model_dir)
        config_path = model_dir / CONFIG_NAME
        config = parse_config_file(config_path) if config_path.is_file() else _pb2().ModelConfig()
        entries.append(ModelEntry(model_dir.name, model_dir, served_versions(config, on_disk, model_dir)))
    return entries


def version_folders(model_dir: Path) -> list[int]:
    """Version numbers present on disk (Triton ignores non-numeric names and names starting with 0)."""
    return sorted(int(p.name) for p in Path(model_dir).iterdir()
                  if p.is_dir() and p.name.isdigit() and not p.name.startswith("0"))


def served_versions(config: model_config_pb2.ModelConfig, on_disk: list[int], model_dir: Path) -> list[int]:
    policy = config.version_policy
    which = policy.WhichOneof("policy_choice")
    if which == "all":
        return list(on_disk)
    if which == "specific":
        missing = sorted(set(policy.specific.versions) - set(on_disk))
        if missing:
            raise UserError(f"{model_dir / CONFIG_NAME} asks for versions {missing}, which have no folder in "
                            f"{model_dir}; add them or change version_policy")
        return sorted(set(policy.specific.versions))
    n = policy.latest.num_versions if which == "latest" else 1
    if n < 1:
        raise UserError(f"{model_dir / CONFIG_NAME} has version_policy latest num_versions={n}; it must be >= 1")
    return on_disk[-n:]


def parse_config_file(path: Path) -> model_config_pb2.ModelConfig:
    """Parse a config.pbtxt; a syntax error becomes a UserError naming the file, line and column."""
    from google.protobuf import text_format

    path = Path(path)
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise UserError(f"cannot read model configuration {path} ({e}); fix its permissions or contents") from None
    try:
        return text_format.Parse(text, _pb2().ModelConfig())
    except text_format.ParseError as e:
        where = f"{path}:{e.GetLine()}:{e.GetColumn()}" if e.GetLine() else str(path)
        # str(e) starts with "line:col : " already; keep only the reason.
        reason = str(e).split(" : ", 1)[-1]
        raise UserError(f"{where}: malformed model configuration ({reason}); fix it or delete it to let it be "
                        "derived from the ONNX model") from None


def model_path(model_dir: Path, version: int, config: model_config_pb2.ModelConfig) -> Path:
    """The ONNX file of one version (a UserError when missing)."""
    path = Path(model_dir) / str(version) / (config.default_model_filename or DEFAULT_MODEL_FILENAME)
    if not path.exists():
        raise UserError(f"model {Path(model_dir).name!r} version {version} has no model file at {path}; "
                        "put the ONNX model there or remove the version folder")
    return path


def read_model_config(model_dir: Path, default_max_batch_size: int = TRITON_DEFAULT_MAX_BATCH_SIZE,
                      auto_complete: bool = True) -> model_config_pb2.ModelConfig:
    """A model's configuration: config.pbtxt when present, completed from the ONNX signature as Triton does.

    Following Triton (core + onnxruntime backend) with auto-complete on:
    - name defaults to the folder name (a different name is an error); backend "onnxruntime" and
      platform "onnxruntime_onnx" are filled; default_model_filename defaults to model.onnx;
      version_policy defaults to latest 1.
    - the ONNX model of the highest served version is read; it "can batch" when every input and
      output has a variable first dimension. Then max_batch_size 0 becomes `default_max_batch_size`
      (Triton's default-max-batch-size, 4), and a model with max_batch_size > 1 and no batcher gets
      an empty dynamic_batching. A model that cannot batch with max_batch_size > 0 is an error.
    - inputs (and, separately, outputs) are derived only when the configuration lists none: the
      ONNX names and types, dims without the batch dimension when max_batch_size > 0 (variable
      dims as -1; a scalar per sample becomes dims [1] with an empty reshape).
    - instance_group is left as written: where to run is the server's choice (Triton: one per GPU,
      else CPU).
    """
    pb = _pb2()
    model_dir = Path(model_dir)
    if not model_dir.is_dir():
        raise UserError(f"model folder {model_dir} does not exist; check the repository path")
    config_path = model_dir / CONFIG_NAME
    config = parse_config_file(config_path) if config_path.is_file() else pb.ModelConfig()
    source = str(config_path) if config_path.is_file() else f"{model_dir} (no {CONFIG_NAME})"

    if config.name and config.name != model_dir.name:
        raise UserError(f"{source} names the model {config.name!r} but its folder is {model_dir.name!r}; "
                        "make them match")
    config.name = model_dir.name
    if config.platform not in ("", ONNX_PLATFORM) or config.backend not in ("", ONNX_BACKEND):
        raise UserError(f"{source} is for platform {config.platform!r} backend {config.backend!r}; only ONNX models "
                        f"(platform {ONNX_PLATFORM!r}, backend {ONNX_BACKEND!r}) can be served here")
    config.platform, config.backend = ONNX_PLATFORM, ONNX_BACKEND
    if not config.default_model_filename:
        config.default_model_filename = DEFAULT_MODEL_FILENAME
    if config.version_policy.WhichOneof("policy_choice") is None:
        config.version_policy.latest.num_versions = 1
    if config.max_batch_size < 0:
        raise UserError(f"{source} has max_batch_size {config.max_batch_size}; it must be >= 0")
    if not auto_complete:
        return config

    versions = served_versions(config, version_folders(model_dir), model_dir)
    if not versions:
        raise UserError(f"model folder {model_dir} has no version folder (e.g. {model_dir}/1/"
                        f"{config.default_model_filename}); add one")
    inputs, outputs = onnx_signature(model_path(model_dir, versions[-1], config))
    _complete_max_batch(config, inputs, outputs, source, default_max_batch_size)
    if not config.input:
        _complete_io(config.input, inputs, config.max_batch_size)
    if not config.output:
        _complete_io(config.output, outputs, config.max_batch_size)
    return config


@dataclass
class OnnxTensor:
    name: str
    triton_type: str  # "TYPE_FP32", ...
    dims: list[int] = field(default_factory=list)  # -1 for a variable dimension, batch included


def onnx_signature(path: Path) -> tuple[list[OnnxTensor], list[OnnxTensor]]:
    """Graph inputs (initializers excluded) and outputs of an ONNX file, without loading its weights."""
    import onnx

    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception as e:  # onnx raises DecodeError, ValueError, OSError... for a bad file
        raise UserError(f"{path} is not a readable ONNX model ({type(e).__name__}: {e}); replace it") from None
    graph = model.graph
    initializers = {t.name for t in graph.initializer}

    def tensors(values: Any) -> list[OnnxTensor]:
        out = []
        for v in values:
            if v.name in initializers:
                continue
            tt = v.type.tensor_type
            type_name = onnx.TensorProto.DataType.Name(tt.elem_type)
            if type_name not in ONNX_TO_TRITON:
                raise UserError(f"{path}: tensor {v.name!r} has ONNX type {type_name}, which Triton cannot serve")
            dims = [d.dim_value if d.HasField("dim_value") else -1 for d in tt.shape.dim]
            out.append(OnnxTensor(v.name, ONNX_TO_TRITON[type_name], dims))
        return out

    return tensors(graph.input), tensors(graph.output)


def _complete_max_batch(config: Any, inputs: list[OnnxTensor], outputs: list[OnnxTensor], source: str,
                        default_max_batch_size: int) -> None:
    can_batch = all(t.dims and t.dims[0] == -1 for t in inputs + outputs)
    if can_batch:
        if config.max_batch_size == 0:
            config.max_batch_size = max(default_max_batch_size, 0)
            log.info("%s: batching supported, max_batch_size auto-filled to %d", source, config.max_batch_size)
        if config.max_batch_size > 1 and not (config.HasField("dynamic_batching") or config.HasField("sequence_batching")):
            config.dynamic_batching.SetInParent()
    elif config.max_batch_size != 0:
        fixed = [t.name for t in inputs + outputs if not (t.dims and t.dims[0] == -1)]
        raise UserError(f"{source} sets max_batch_size {config.max_batch_size} but the ONNX model cannot batch "
                        f"(first dimension fixed for {', '.join(fixed)}); set max_batch_size: 0 or export with a "
                        "dynamic batch dimension")


def _complete_io(dest: Any, tensors: list[OnnxTensor], max_batch_size: int) -> None:
    pb = _pb2()
    for t in tensors:
        dims = t.dims[1:] if max_batch_size > 0 else list(t.dims)
        io = dest.add(name=t.name, data_type=pb.DataType.Value(t.triton_type), dims=dims or [1])
        if not dims and max_batch_size > 0:
            io.reshape.SetInParent()  # per-sample scalar: dims [1] reshaped to shape []
