"""What the server says about the model under test, and the request tensors built from it.

Works the same against NVIDIA Triton and the embedded server: server metadata (`GET /v2`), model
readiness, model metadata (input/output names, datatypes, shapes) and Triton's model-configuration
extension (max_batch_size, instance_group kind), over HTTP or gRPC with tritonclient.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from trainserve.core.errors import UserError

# The extension name trainserve's embedded server lists in its server metadata, besides the name "triton"
# it shares with NVIDIA Triton: part of the protocol between the stages (serve/engine/server_core.py sends it; a test
# checks both sides agree).
EMBEDDED_EXTENSION = "trainserve"

DYNAMIC_DIM = 16  # size given to a variable non-batch dimension (e.g. a sequence length)


@dataclass
class TensorSpec:
    name: str
    datatype: str  # Triton datatype, e.g. "FP32", "INT64"
    shape: list[int]  # as the server reports it: -1 = variable


@dataclass
class ModelInfo:
    name: str
    inputs: list[TensorSpec]
    outputs: list[TensorSpec]
    max_batch_size: int = 0
    device: str = "cpu"  # "cuda" when the first instance_group is KIND_GPU
    server_name: str = ""
    server_version: str = ""
    server_extensions: list[str] = field(default_factory=list)
    config: dict[str, Any] = field(default_factory=dict)

    @property
    def backend(self) -> str:
        """'triton' for NVIDIA Triton, 'onnxruntime' for the embedded server (and stand-ins).

        The embedded server also calls itself "triton" (for programs written against Triton); it lists the
        extension "trainserve", which Triton never does.
        """
        return "triton" if self.server_name == "triton" and not self.embedded else "onnxruntime"

    @property
    def embedded(self) -> bool:
        """True for trainserve's embedded server."""
        return EMBEDDED_EXTENSION in self.server_extensions

    @property
    def frontends(self) -> int | None:
        """Front-end processes of the embedded server (its served config's parameter `frontends`); None for Triton."""
        value = ((self.config.get("parameters") or {}).get("frontends") or {}).get("string_value")
        return int(value) if isinstance(value, str) and value.isdigit() else None

    @property
    def server_label(self) -> str:
        """The server as a report names it: 'trainserve' for the embedded one, else what it calls itself."""
        return "trainserve" if self.embedded else self.server_name

    def request_shape(self, spec: TensorSpec, batch: int) -> list[int]:
        dims = list(spec.shape)
        if dims and (self.max_batch_size > 0 or dims[0] == -1):
            dims[0] = batch
        return [DYNAMIC_DIM if d < 0 else d for d in dims]

    def variable_dims(self, spec: TensorSpec) -> list[bool]:
        """Which dimensions of a response may take any size (variable, and not the batch)."""
        batched = bool(spec.shape) and (self.max_batch_size > 0 or spec.shape[0] == -1)
        return [d < 0 and not (i == 0 and batched) for i, d in enumerate(spec.shape)]


def describe_error(e: BaseException) -> str:
    """A readable one-line message, unwrapping tritonclient's InferenceServerException."""
    from tritonclient.utils import InferenceServerException

    if isinstance(e, InferenceServerException):
        status, msg = e.status(), e.message()
        return f"[{status}] {msg}" if status else str(msg)
    text = str(e) or type(e).__name__
    return f"{type(e).__name__}: {text}" if type(e).__name__ not in text else text


def unreachable_in_words(e: BaseException, protocol: str, timeout_s: float) -> str:
    """Why no server answered, in words rather than Python's exception text."""
    text = describe_error(e)
    if isinstance(e, ConnectionRefusedError) or "Connection refused" in text or "ECONNREFUSED" in text:
        return "nothing listens on that port"
    if isinstance(e, TimeoutError) or "timed out" in text.lower() or "DEADLINE_EXCEEDED" in text:
        return f"nothing answered within {timeout_s:g} s"
    if "HTTPParseError" in text or "Expected HTTP/" in text:
        return "what answers there does not speak HTTP (a gRPC port? gRPC listens on 8001 by default)"
    if "UNAVAILABLE" in text and protocol == "grpc":
        return "no gRPC server answers there (an HTTP port? HTTP listens on 8000 by default)"
    if "Name or service not known" in text or "nodename nor servname" in text or "getaddrinfo" in text:
        return "that host name is not known"
    return text


def _served_models(client: Any, protocol: str) -> list[str]:
    """The names of the models the server holds (its repository index); [] when it cannot say."""
    try:
        index = client.get_model_repository_index(**_as_json(protocol))
    except Exception:  # an old server without the index: the sentence simply lists none
        return []
    entries = index.get("models", index) if isinstance(index, dict) else index
    return sorted({e.get("name", "") for e in entries if isinstance(e, dict) and e.get("name")})


def fetch_model_info(url: str, model: str, protocol: str, timeout_s: float = 5.0) -> ModelInfo:
    """Check that the server and the model are ready and read the model's metadata, or raise UserError."""
    try:
        if protocol == "grpc":
            import tritonclient.grpc as tc

            client = tc.InferenceServerClient(url)
        else:
            import tritonclient.http as tc

            client = tc.InferenceServerClient(url, connection_timeout=timeout_s, network_timeout=timeout_s)
    except Exception as e:  # a malformed URL
        raise UserError(f"cannot use server URL {url!r} ({describe_error(e)}); pass --url HOST:PORT") from None
    try:
        ready = client.is_server_ready(**({"client_timeout": timeout_s} if protocol == "grpc" else {}))
    except Exception as e:
        raise UserError(f"no {'gRPC' if protocol == 'grpc' else 'HTTP'} inference server answers at {url} "
                        f"({unreachable_in_words(e, protocol, timeout_s)}); "
                        "start one (trainserve serve, or docker compose up) or fix --url") from None
    try:
        if not ready:
            raise UserError(f"the server at {url} is not ready yet; wait for it to finish loading models")
        if not client.is_model_ready(model):
            served = _served_models(client, protocol)
            if served and model not in served:
                raise UserError(f"the server at {url} has no model {model!r}; it serves {', '.join(served)}")
            raise UserError(f"model {model!r} is not ready on the server at {url}; "
                            f"check the name (trainserve serve lists the models it loaded)")
        server = client.get_server_metadata(**_as_json(protocol))
        meta = client.get_model_metadata(model, **_as_json(protocol))
        config = client.get_model_config(model, **_as_json(protocol))
    except UserError:
        raise
    except Exception as e:
        raise UserError(f"could not read model {model!r} from {url}: {describe_error(e)}") from None
    finally:
        client.close()
    config = config.get("config", config)  # gRPC wraps it in {"config": ...}
    groups = config.get("instance_group") or [{}]
    return ModelInfo(
        name=model,
        inputs=[_spec(t) for t in meta.get("inputs", [])],
        outputs=[_spec(t) for t in meta.get("outputs", [])],
        max_batch_size=int(config.get("max_batch_size", 0) or 0),
        device="cuda" if groups[0].get("kind") == "KIND_GPU" else "cpu",
        server_name=str(server.get("name", "")),
        server_version=str(server.get("version", "")),
        server_extensions=[str(e) for e in server.get("extensions", []) or []],
        config=config,
    )


def _as_json(protocol: str) -> dict[str, Any]:
    return {"as_json": True} if protocol == "grpc" else {}


def _spec(t: dict[str, Any]) -> TensorSpec:
    # gRPC's JSON form spells int64 dims as strings
    return TensorSpec(name=t["name"], datatype=t["datatype"], shape=[int(d) for d in t.get("shape", [])])


def build_arrays(info: ModelInfo, batch: int, input_data: str = "random", seed: int = 0) -> dict[str, np.ndarray]:
    """One request's input arrays: random data, or the first `batch` rows of an .npz (tiled if shorter)."""
    from tritonclient.utils import triton_to_np_dtype

    if batch > info.max_batch_size > 0:
        raise UserError(f"batch size {batch} exceeds model {info.name!r}'s max_batch_size "
                        f"{info.max_batch_size}; pass a smaller --batch")
    if input_data != "random":
        return _arrays_from_npz(info, batch, Path(input_data))
    rng = np.random.default_rng(seed)
    out = {}
    for spec in info.inputs:
        dtype = triton_to_np_dtype(spec.datatype)
        if dtype is None or spec.datatype == "BYTES":
            raise UserError(f"input {spec.name!r} has datatype {spec.datatype}, which random data cannot fill; "
                            "pass --input-data FILE.npz")
        shape = info.request_shape(spec, batch)
        if np.issubdtype(dtype, np.integer):
            out[spec.name] = rng.integers(0, 10, size=shape).astype(dtype)  # small ids fit any vocabulary
        elif dtype == np.bool_:
            out[spec.name] = rng.integers(0, 2, size=shape).astype(bool)
        else:
            out[spec.name] = rng.standard_normal(shape).astype(dtype)
    return out


def _arrays_from_npz(info: ModelInfo, batch: int, path: Path) -> dict[str, np.ndarray]:
    from tritonclient.utils import triton_to_np_dtype

    try:
        data = np.load(path)
    except (OSError, ValueError) as e:
        raise UserError(f"cannot read input data {path} ({e}); pass an .npz file or 'random'") from None
    out = {}
    for spec in info.inputs:
        if spec.name not in data:
            raise UserError(f"{path} has no array named {spec.name!r} (it has {sorted(data.files)}); "
                            "name the arrays after the model inputs")
        a = np.asarray(data[spec.name]).astype(triton_to_np_dtype(spec.datatype), copy=False)
        if info.max_batch_size > 0 or (spec.shape and spec.shape[0] == -1):
            reps = -(-batch // len(a))
            a = np.concatenate([a] * reps)[:batch] if reps > 1 else a[:batch]
        out[spec.name] = np.ascontiguousarray(a)
    return out


class Validator:
    """Checks one response's outputs: shape and dtype, or also values against recorded outputs."""

    def __init__(self, info: ModelInfo, batch: int, mode: str, expected_path: str = "",
                 rtol: float = 1e-3, atol: float = 1e-4) -> None:
        from tritonclient.utils import triton_to_np_dtype

        self.mode = mode
        self.rtol, self.atol = rtol, atol
        self.specs = [(o.name, np.dtype(triton_to_np_dtype(o.datatype)), info.request_shape(o, batch),
                       info.variable_dims(o)) for o in info.outputs]
        self.expected: dict[str, np.ndarray] = {}
        if mode == "values":
            try:
                data = np.load(expected_path)
            except (OSError, ValueError) as e:
                raise UserError(f"cannot read expected outputs {expected_path} ({e}); pass an .npz") from None
            for name, *_ in self.specs:
                if name not in data:
                    raise UserError(f"{expected_path} has no array named {name!r}; name them after the outputs")
                self.expected[name] = np.asarray(data[name])[:batch]

    def check(self, outputs: dict[str, np.ndarray]) -> str | None:
        """None when the response is right, else one sentence saying what is wrong."""
        for name, dtype, shape, variable in self.specs:
            a = outputs.get(name)
            if a is None:
                return f"output {name!r} missing from the response"
            if a.dtype != dtype:
                return f"output {name!r} has dtype {a.dtype}, expected {dtype}"
            if len(a.shape) != len(shape) or any(
                    not var and got != want for got, want, var in zip(a.shape, shape, variable, strict=False)):
                return f"output {name!r} has shape {list(a.shape)}, expected {shape}"
            if self.mode == "values":
                want = self.expected[name]
                if want.shape != a.shape or not np.allclose(a, want, rtol=self.rtol, atol=self.atol):
                    diff = float(np.max(np.abs(a.astype(np.float64) - want))) if want.shape == a.shape else None
                    return f"output {name!r} differs from the expected values (max abs diff {diff})"
        return None
