"""KServe v2 datatype names <-> numpy dtypes <-> model_config DataType enum names <-> ONNX type strings."""

from __future__ import annotations

import numpy as np

from trainserve.serve.errors import InvalidArgument

# KServe name -> numpy dtype. BYTES tensors are numpy object arrays holding `bytes`.
KSERVE_TO_NUMPY: dict[str, np.dtype] = {
    "BOOL": np.dtype(np.bool_),
    "UINT8": np.dtype(np.uint8),
    "UINT16": np.dtype(np.uint16),
    "UINT32": np.dtype(np.uint32),
    "UINT64": np.dtype(np.uint64),
    "INT8": np.dtype(np.int8),
    "INT16": np.dtype(np.int16),
    "INT32": np.dtype(np.int32),
    "INT64": np.dtype(np.int64),
    "FP16": np.dtype(np.float16),
    "FP32": np.dtype(np.float32),
    "FP64": np.dtype(np.float64),
    "BYTES": np.dtype(np.object_),
}
NUMPY_TO_KSERVE: dict[np.dtype, str] = {v: k for k, v in KSERVE_TO_NUMPY.items()}
NUMPY_TO_KSERVE[np.dtype(np.bytes_)] = "BYTES"

# onnxruntime's type strings -> KServe name
ONNX_TO_KSERVE: dict[str, str] = {
    "tensor(bool)": "BOOL",
    "tensor(uint8)": "UINT8",
    "tensor(uint16)": "UINT16",
    "tensor(uint32)": "UINT32",
    "tensor(uint64)": "UINT64",
    "tensor(int8)": "INT8",
    "tensor(int16)": "INT16",
    "tensor(int32)": "INT32",
    "tensor(int64)": "INT64",
    "tensor(float16)": "FP16",
    "tensor(float)": "FP32",
    "tensor(double)": "FP64",
    "tensor(string)": "BYTES",
}


def config_to_kserve(enum_name: str) -> str:
    """'TYPE_FP32' -> 'FP32'; 'TYPE_STRING' -> 'BYTES' (model_config.proto's DataType names)."""
    name = enum_name.removeprefix("TYPE_")
    return "BYTES" if name == "STRING" else name


def kserve_to_config(datatype: str) -> str:
    """'FP32' -> 'TYPE_FP32'; 'BYTES' -> 'TYPE_STRING'."""
    return "TYPE_STRING" if datatype == "BYTES" else f"TYPE_{datatype}"


def numpy_dtype(datatype: str) -> np.dtype:
    """The numpy dtype of a KServe datatype; InvalidArgument for an unknown name."""
    try:
        return KSERVE_TO_NUMPY[datatype]
    except KeyError:
        raise InvalidArgument(f"invalid datatype '{datatype}'") from None


def kserve_datatype(array: np.ndarray) -> str:
    """The KServe datatype of a numpy array; InvalidArgument for a dtype KServe has no name for."""
    try:
        return NUMPY_TO_KSERVE[array.dtype]
    except KeyError:
        if array.dtype.kind in "SU":
            return "BYTES"
        raise InvalidArgument(f"numpy dtype {array.dtype} has no KServe datatype") from None
