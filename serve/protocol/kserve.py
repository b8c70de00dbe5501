"""The KServe v2 HTTP/REST encoding: JSON tensors and Triton's binary tensor extension, both directions.

Pure functions between request bytes and numpy arrays; the HTTP front end does the transport.
BYTES elements travel as a 4-byte little-endian length then the bytes, in the binary section.
"""

from __future__ import annotations

import json
import math
import struct
from dataclasses import dataclass

import numpy as np

from trainserve.serve.datatypes import kserve_datatype, numpy_dtype
from trainserve.serve.request_errors import InvalidArgument, Unsupported

HEADER_LENGTH = "Inference-Header-Content-Length"
_COMPACT = json.JSONEncoder(separators=(",", ":"))  # built once: json.dumps with options builds one per call


@dataclass
class InferRequest:
    """A decoded infer request: inputs as numpy, the outputs asked for and how each is to be encoded."""

    id: str | None
    inputs: dict[str, np.ndarray]
    outputs: list[str] | None  # None = all of the model's outputs
    binary_outputs: dict[str, bool]  # output name -> send in the binary section
    binary_default: bool  # request parameter binary_data_output: for outputs not named
    parameters: dict


def _shape(raw, name: str) -> tuple[int, ...]:
    if not isinstance(raw, list) or not all(isinstance(d, int) and d >= 0 for d in raw):
        raise InvalidArgument(f"input '{name}': shape must be a list of non-negative integers, got {raw!r}")
    return tuple(raw)


def deserialize_bytes(buf: memoryview | bytes, count: int, name: str) -> np.ndarray:
    """Length-prefixed BYTES elements -> 1-D object array of `bytes`."""
    out = np.empty(count, dtype=object)
    offset, size = 0, len(buf)
    for i in range(count):
        if offset + 4 > size:
            raise InvalidArgument(f"unexpected end of BYTES data for input '{name}': expected {count} elements, found {i}")
        (length,) = struct.unpack_from("<I", buf, offset)
        offset += 4
        if offset + length > size:
            raise InvalidArgument(f"unexpected end of BYTES data for input '{name}': element {i} is truncated")
        out[i] = bytes(buf[offset : offset + length])
        offset += length
    if offset != size:
        raise InvalidArgument(f"input '{name}' has {size - offset} bytes beyond its {count} BYTES elements")
    return out


def serialize_bytes(array: np.ndarray) -> bytes:
    """Object/str/bytes array -> length-prefixed elements in row-major order."""
    parts = []
    for item in array.reshape(-1):
        b = item if isinstance(item, bytes) else str(item).encode()
        parts.append(struct.pack("<I", len(b)))
        parts.append(b)
    return b"".join(parts)


def _tensor_from_json(t: dict, name: str, datatype: str, shape: tuple[int, ...]) -> np.ndarray:
    data = t.get("data")
    if data is None:
        raise InvalidArgument(f"input '{name}' has neither 'data' nor binary_data_size")
    try:
        if datatype == "BYTES":
            flat = np.array(data, dtype=object).reshape(-1)
            array = np.array([s.encode() if isinstance(s, str) else bytes(s) for s in flat], dtype=object)
        else:
            array = _numbers(np.array(data), numpy_dtype(datatype), name, datatype)
    except (ValueError, TypeError, OverflowError, RecursionError) as e:
        raise InvalidArgument(f"input '{name}': data does not match datatype {datatype}: {e}") from None
    if array.size != math.prod(shape):
        raise InvalidArgument(
            f"input '{name}': shape {list(shape)} expects {math.prod(shape)} elements, the request has {array.size}"
        )
    return array.reshape(shape)


def _numbers(raw: np.ndarray, dtype: np.dtype, name: str, datatype: str) -> np.ndarray:
    """JSON numbers as `dtype`, refusing any value the datatype cannot hold as given: a fraction or an
    out-of-range number for an integer type, a number for BOOL, a finite number too large for a float type
    (numpy would truncate, wrap or overflow silently)."""
    def refuse(bad: np.ndarray, what: str) -> InvalidArgument:
        first = raw.reshape(-1)[np.flatnonzero(bad.reshape(-1))[0]].item()
        return InvalidArgument(f"input '{name}': value {first!r} is not a valid {datatype} ({what})")

    if raw.size == 0:
        return raw.astype(dtype)
    if raw.dtype.kind not in "biuf":
        raise InvalidArgument(f"input '{name}': data does not match datatype {datatype}: expected numbers")
    if dtype.kind == "b":
        if raw.dtype.kind != "b":
            raise refuse(np.ones(raw.shape, bool), "BOOL data is true or false")
        return raw
    if raw.dtype.kind == "b":
        raise refuse(np.ones(raw.shape, bool), f"{datatype} data is numbers, not true or false")
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        if raw.dtype.kind == "f":
            bad = ~np.isfinite(raw) | (raw != np.trunc(raw))
            if bad.any():
                raise refuse(bad, "integer types take whole numbers")
        bad = (raw < info.min) | (raw > info.max)
        if bad.any():
            raise refuse(bad, f"outside {info.min}..{info.max}")
        return raw.astype(dtype)
    with np.errstate(over="ignore"):  # an overflow is reported below, as the request's error
        out = raw.astype(dtype)
    bad = ~np.isfinite(out) & np.isfinite(raw)
    if bad.any():
        raise refuse(bad, f"too large for {datatype}")
    return out


def parse_infer_request(body: bytes | bytearray | memoryview, header_length: int | None) -> InferRequest:
    """Request body (JSON header, then the binary section when header_length is given) -> InferRequest."""
    if header_length is not None and not 0 < header_length <= len(body):
        raise InvalidArgument(f"{HEADER_LENGTH} {header_length} is outside the body of {len(body)} bytes")
    # json.loads takes bytes and bytearray but not a memoryview (the lean HTTP path's body): copy only the header
    header = body if header_length is None else body[:header_length]
    if isinstance(header, memoryview):
        header = header.tobytes()
    try:
        req = json.loads(header)
    except json.JSONDecodeError as e:  # Triton's wording (src/http_server.cc); the detail is Python's, not rapidjson's
        raise InvalidArgument(f"failed to parse the request JSON buffer: {e.msg} at {e.pos}") from None
    except (UnicodeDecodeError, ValueError) as e:
        raise InvalidArgument(f"failed to parse the request JSON buffer: {e}") from None
    except RecursionError:  # arrays or objects nested thousands deep: a request error, not a server fault
        raise InvalidArgument("failed to parse the request JSON buffer: it is nested too deeply") from None
    if not isinstance(req, dict) or not isinstance(req.get("inputs"), list):
        raise InvalidArgument("failed to parse the request JSON: expected an object with an 'inputs' array")
    binary = memoryview(body)[header_length:] if header_length is not None else memoryview(b"")
    inputs = _inputs(req["inputs"], binary)

    params = req.get("parameters") or {}
    if not isinstance(params, dict):
        raise InvalidArgument("request 'parameters' must be an object")
    binary_default = bool(params.get("binary_data_output", False))
    outputs = None
    binary_outputs: dict[str, bool] = {}
    if req.get("outputs"):
        outputs = _requested_outputs(req["outputs"], binary_default, binary_outputs)
    rid = req.get("id")
    return InferRequest(rid if isinstance(rid, str) else None, inputs, outputs, binary_outputs, binary_default, params)


def _inputs(entries: list, binary: memoryview) -> dict[str, np.ndarray]:
    """The request's "inputs" as arrays: each from its JSON `data`, or from its `binary_data_size` bytes of the
    binary section, taken in order (the arrays are views of the body, not copies); every binary byte must
    belong to an input."""
    offset = 0
    inputs: dict[str, np.ndarray] = {}
    for t in entries:
        if not isinstance(t, dict) or not isinstance(t.get("name"), str):
            raise InvalidArgument("each input must be an object with a 'name'")
        name = t["name"]
        datatype = t.get("datatype")
        if not isinstance(datatype, str):
            raise InvalidArgument(f"input '{name}' has no 'datatype'")
        dtype = numpy_dtype(datatype)
        shape = _shape(t.get("shape"), name)
        params = t.get("parameters") or {}
        if "shared_memory_region" in params:
            raise Unsupported("shared memory inputs are not supported by this server")
        size = params.get("binary_data_size")
        if size is None:
            inputs[name] = _tensor_from_json(t, name, datatype, shape)
            continue
        if not isinstance(size, int) or size < 0:
            raise InvalidArgument(f"input '{name}': binary_data_size must be a non-negative integer")
        if offset + size > len(binary):
            raise InvalidArgument(
                f"unexpected end of binary data for input '{name}': it needs {size} bytes at offset {offset}, "
                f"the request has {len(binary)} binary bytes"
            )
        chunk = binary[offset : offset + size]
        offset += size
        count = math.prod(shape)
        if datatype == "BYTES":
            inputs[name] = deserialize_bytes(chunk, count, name).reshape(shape)
        else:
            if size != count * dtype.itemsize:
                raise InvalidArgument(
                    f"unexpected total byte size {size} for input '{name}', expecting {count * dtype.itemsize}"
                )
            inputs[name] = np.frombuffer(chunk, dtype=dtype).reshape(shape)
    if offset != len(binary):
        raise InvalidArgument(f"the request has {len(binary) - offset} unexpected bytes after its binary input data")
    return inputs


def _requested_outputs(entries: list, binary_default: bool, binary_outputs: dict[str, bool]) -> list[str]:
    """The names of the request's "outputs", in order; how each is to be sent goes into `binary_outputs` (its
    binary_data parameter, else the request's binary_data_output)."""
    outputs = []
    for o in entries:
        if not isinstance(o, dict) or not isinstance(o.get("name"), str):
            raise InvalidArgument("each requested output must be an object with a 'name'")
        oparams = o.get("parameters") or {}
        if "shared_memory_region" in oparams:
            raise Unsupported("shared memory outputs are not supported by this server")
        if oparams.get("classification"):
            raise Unsupported("the classification extension is not supported by this server")
        outputs.append(o["name"])
        binary_outputs[o["name"]] = bool(oparams.get("binary_data", binary_default))
    return outputs


def encode_infer_response(
    model_name: str, model_version: str, request: InferRequest, results: dict[str, np.ndarray]
) -> tuple[bytes, int | None]:
    """Results -> (body, header_length): header_length is None when every output went as JSON data."""
    outs = []
    blobs: list[bytes] = []
    for name, array in results.items():
        datatype = kserve_datatype(array)
        entry: dict = {"name": name, "datatype": datatype, "shape": list(array.shape)}
        if request.binary_outputs.get(name, request.binary_default):
            raw = serialize_bytes(array) if datatype == "BYTES" else np.ascontiguousarray(array).tobytes()
            entry["parameters"] = {"binary_data_size": len(raw)}
            blobs.append(raw)
        elif datatype == "BYTES":
            entry["data"] = [b.decode("utf-8", "replace") if isinstance(b, bytes) else str(b) for b in array.reshape(-1)]
        else:
            entry["data"] = array.reshape(-1).tolist()
        outs.append(entry)
    response: dict = {"model_name": model_name, "model_version": model_version}
    if request.id is not None:
        response["id"] = request.id
    response["outputs"] = outs
    header = _COMPACT.encode(response).encode()
    if not blobs:
        return header, None
    return b"".join([header, *blobs]), len(header)


def error_body(message: str) -> bytes:
    """Triton's error shape: {"error": "..."}."""
    return json.dumps({"error": message}).encode()
