"""KServe v2 datatype names <-> numpy dtypes (tritonclient's mapping) <-> model_config DataType enum names."""

from __future__ import annotations

import numpy as np
from tritonclient.utils import np_to_triton_dtype, triton_to_np_dtype

from trainserve.serve.request_errors import InvalidArgument

# The datatypes this server decodes and encodes, in the KServe v2 order. tritonclient maps names to
# numpy dtypes and back but has no list of the names a server accepts, so that list is kept here.
# BF16 is left out: numpy has no bfloat16 (tritonclient answers ml_dtypes.bfloat16), and the server
# hands onnxruntime plain numpy arrays.
SERVED_DATATYPES = ("BOOL", "UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32", "INT64",
                    "FP16", "FP32", "FP64", "BYTES")
# KServe name -> numpy dtype. BYTES tensors are numpy object arrays holding `bytes`.
KSERVE_TO_NUMPY: dict[str, np.dtype] = {name: np.dtype(triton_to_np_dtype(name)) for name in SERVED_DATATYPES}
# the reverse, looked up once per response tensor: a dict, not tritonclient's chain of comparisons
NUMPY_TO_KSERVE: dict[np.dtype, str] = {dtype: np_to_triton_dtype(dtype) for dtype in KSERVE_TO_NUMPY.values()}


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
        if array.dtype.kind in "SU":  # fixed-width bytes or str of any width
            return "BYTES"
        raise InvalidArgument(f"numpy dtype {array.dtype} has no KServe datatype") from None
