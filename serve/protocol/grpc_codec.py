"""KServe v2 gRPC messages <-> numpy: the tensor half of the gRPC front end.

Requests carry each input either as typed `contents` (`fp32_contents`, `int64_contents`, ...) or as
bytes in `raw_input_contents` (what tritonclient sends); responses always use `raw_output_contents`,
as Triton does, because every client reads it and it avoids a per-element copy. BYTES tensors travel
as a 4-byte little-endian length before each element, in row-major order.

Nothing here knows about models: a decoded input is checked only against what the request itself
declares (datatype, shape, byte count); the core checks it against the model.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
from tritonclient.grpc import service_pb2 as pb

from trainserve.serve.datatypes import KSERVE_TO_NUMPY as DTYPES
from trainserve.serve.datatypes import kserve_datatype as datatype_of
from trainserve.serve.request_errors import InvalidArgument
from trainserve.serve.protocol.kserve import deserialize_bytes as decode_bytes_tensor
from trainserve.serve.protocol.kserve import serialize_bytes as encode_bytes_tensor

# Which InferTensorContents field holds a datatype's typed elements (FP16 has none: raw only).
_CONTENTS_FIELD = {
    "BOOL": "bool_contents",
    "INT8": "int_contents", "INT16": "int_contents", "INT32": "int_contents",
    "INT64": "int64_contents",
    "UINT8": "uint_contents", "UINT16": "uint_contents", "UINT32": "uint_contents",
    "UINT64": "uint64_contents",
    "FP32": "fp32_contents",
    "FP64": "fp64_contents",
    "BYTES": "bytes_contents",
}


class CodecError(InvalidArgument):
    """A tensor that cannot be decoded as declared (gRPC INVALID_ARGUMENT)."""


def _element_count(shape: list[int], name: str) -> int:
    if any(d < 0 for d in shape):
        raise CodecError(f"input '{name}' has a negative dimension in shape {list(shape)}")
    return math.prod(shape)


def decode_raw(raw: bytes, datatype: str, shape: list[int], name: str) -> np.ndarray:
    """One `raw_input_contents` entry -> array of `shape`; the byte count must match exactly."""
    count = _element_count(shape, name)
    if datatype == "BYTES":
        return decode_bytes_tensor(raw, count, name).reshape(shape)
    dtype = DTYPES[datatype]
    expected = count * dtype.itemsize
    if len(raw) != expected:
        raise CodecError(f"input byte size mismatch for input '{name}': expected {expected} bytes "
                         f"({datatype} {list(shape)}), got {len(raw)}")
    return np.frombuffer(raw, dtype=dtype).reshape(shape)


def decode_contents(contents: pb.InferTensorContents, datatype: str, shape: list[int], name: str) -> np.ndarray:
    """Typed `contents` of one input -> array of `shape`; the element count must match exactly."""
    count = _element_count(shape, name)
    field = _CONTENTS_FIELD.get(datatype)
    if field is None:
        raise CodecError(f"input '{name}' of datatype {datatype} must be sent in raw_input_contents")
    values = getattr(contents, field)
    if len(values) != count:
        raise CodecError(f"unexpected number of elements for input '{name}': expected {count} "
                         f"({datatype} {list(shape)}), got {len(values)} in {field}")
    if datatype == "BYTES":
        out = np.empty(count, dtype=np.object_)
        out[:] = list(values)
        return out.reshape(shape)
    return np.asarray(values, dtype=DTYPES[datatype]).reshape(shape)


# Triton's typed-contents fields in the order its InferGRPCToInput looks at them, with the datatype each holds
# (int_contents and uint_contents also hold the 8- and 16-bit types)
_TYPED_FIELDS = (("bool_contents", ("BOOL",)), ("int_contents", ("INT8", "INT16", "INT32")),
                 ("int64_contents", ("INT64",)), ("uint_contents", ("UINT8", "UINT16", "UINT32")),
                 ("uint64_contents", ("UINT64",)), ("fp32_contents", ("FP32",)), ("fp64_contents", ("FP64",)),
                 ("bytes_contents", ("BYTES",)))


def _check_typed_fields(contents: pb.InferTensorContents, datatype: str, name: str, model: str) -> None:
    """Triton's checks of explicit tensor data, in its order: a field of another type, or a second field."""
    supplied = False
    for field, types in _TYPED_FIELDS:
        if not getattr(contents, field):
            continue
        # Triton's wording (src/grpc/infer_handler.cc, the helper InferGRPCToInput calls per field)
        if supplied:
            raise CodecError(f"unexpected explicit tensor data for input tensor '{name}' for model '{model}', "
                             "binary data was already supplied.")
        if datatype not in types:
            field_type = datatype if datatype in types else types[-1]
            raise CodecError(f"unexpected explicit tensor data for input tensor '{name}' for model '{model}' of "
                             f"type '{field_type}', expected datatype '{datatype}'")
        supplied = True


def decode_inputs(request: pb.ModelInferRequest) -> dict[str, np.ndarray]:
    """All inputs of a request by name, from raw contents when present, else typed contents.

    The checks run in Triton's order (src/grpc/infer_handler.cc, InferGRPCToInput), input by input: typed
    contents beside raw_input_contents; then the input's own data (typed fields, or the next raw entry by
    position); an input left without data. Raw entries beyond the inputs are refused after all of them
    (Triton's loop leaves them unread).
    """
    raw = request.raw_input_contents
    model = request.model_name
    names = [t.name for t in request.inputs]
    for name in names:  # Triton adds every input to the request before it reads any data
        if names.count(name) > 1:
            raise CodecError(f"input '{name}' is given more than once")
    inputs: dict[str, np.ndarray] = {}
    index = 0  # the next raw entry: raw_input_contents are taken in order by the inputs without typed contents
    for tensor in request.inputs:
        name = tensor.name
        has_contents = tensor.HasField("contents")
        if has_contents and raw:
            # Triton's wording (src/grpc/infer_handler.cc)
            raise CodecError(f"contents field must not be specified when using raw_input_contents for '{name}' "
                             f"for model '{model}'")
        if not has_contents and index >= len(raw):
            raise CodecError(f"unable to find data for input tensor '{name}' for model '{model}' in request.")
        if tensor.datatype not in DTYPES:
            raise CodecError(f"input '{name}' has unknown datatype '{tensor.datatype}'; "
                             f"allowed: {', '.join(DTYPES)}")
        shape = list(tensor.shape)
        if has_contents:
            _check_typed_fields(tensor.contents, tensor.datatype, name, model)
            inputs[name] = decode_contents(tensor.contents, tensor.datatype, shape, name)
        else:
            inputs[name] = decode_raw(raw[index], tensor.datatype, shape, name)
            index += 1
    if index < len(raw):
        raise CodecError(f"expected {len(request.inputs)} raw input contents, one per input, got {len(raw)}")
    return inputs


def requested_outputs(request: pb.ModelInferRequest) -> list[str] | None:
    """Names of the outputs the client asked for, or None for all of the model's outputs."""
    return [out.name for out in request.outputs] or None


def params_to_dict(params: Mapping[str, pb.InferParameter]) -> dict[str, Any]:
    """A protobuf parameter map -> plain {name: bool | int | str | float}."""
    out: dict[str, Any] = {}
    for key, param in params.items():
        which = param.WhichOneof("parameter_choice")
        if which is not None:
            out[key] = getattr(param, which)
    return out


def fill_params(target: Any, params: Mapping[str, Any]) -> None:
    """Copy a plain dict into a protobuf parameter map (bool before int: bool is an int in Python)."""
    for key, value in params.items():
        param = target[key]
        if isinstance(value, bool):
            param.bool_param = value
        elif isinstance(value, int):
            param.int64_param = value
        elif isinstance(value, float):
            param.double_param = value
        else:
            param.string_param = str(value)


def encode_response(model_name: str, model_version: str, request_id: str, outputs: Mapping[str, np.ndarray],
                    parameters: Mapping[str, Any] | None = None) -> pb.ModelInferResponse:
    """Outputs in `raw_output_contents`, in the order given, with the request id echoed."""
    response = pb.ModelInferResponse(model_name=model_name, model_version=model_version, id=request_id)
    for name, array in outputs.items():
        datatype = datatype_of(array)
        # metadata only; the data follows in raw_output_contents at the same index
        response.outputs.add(name=name, datatype=datatype, shape=array.shape)
        if datatype == "BYTES":
            response.raw_output_contents.append(encode_bytes_tensor(array))
        else:
            response.raw_output_contents.append(np.ascontiguousarray(array).tobytes())
    if parameters:
        fill_params(response.parameters, parameters)
    return response
