"""The KServe v2 HTTP encoding: JSON and binary tensors, BYTES, requested outputs, malformed bodies."""

from __future__ import annotations

import json
import struct

import numpy as np
import pytest

from trainserve.serve.protocol import kserve
from trainserve.serve.request_errors import InvalidArgument, Unsupported


def _binary_request(header: dict, *blobs: bytes) -> tuple[bytes, int]:
    h = json.dumps(header).encode()
    return h + b"".join(blobs), len(h)


def test_binary_input_is_read_without_copy_and_json_input_parsed():
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    body, n = _binary_request(
        {"id": "r1", "inputs": [
            {"name": "a", "datatype": "FP32", "shape": [2, 4], "parameters": {"binary_data_size": 32}},
            {"name": "b", "datatype": "INT64", "shape": [1, 3], "data": [1, 2, 3]},
        ], "outputs": [{"name": "y", "parameters": {"binary_data": True}}, {"name": "z"}]},
        x.tobytes(),
    )
    req = kserve.parse_infer_request(body, n)
    assert req.id == "r1"
    np.testing.assert_array_equal(req.inputs["a"], x)
    assert req.inputs["a"].base is not None  # a view of the body, not a copy
    np.testing.assert_array_equal(req.inputs["b"], np.array([[1, 2, 3]], dtype=np.int64))
    assert req.outputs == ["y", "z"]
    assert req.binary_outputs == {"y": True, "z": False}


def test_bytes_tensor_round_trip():
    arr = np.array([[b"a"], [b""], [b"hello"]], dtype=object)
    raw = kserve.serialize_bytes(arr)
    assert raw[:5] == struct.pack("<I", 1) + b"a"
    back = kserve.deserialize_bytes(raw, 3, "t").reshape(3, 1)
    assert back.tolist() == arr.tolist()


def test_response_binary_and_json_outputs():
    req = kserve.InferRequest("id7", {}, ["y", "s"], {"y": True, "s": False}, False, {})
    y = np.ones((2, 3), dtype=np.float32)
    body, n = kserve.encode_infer_response("m", "1", req, {"y": y, "s": np.array([b"x"], dtype=object)})
    header = json.loads(body[:n])
    assert header["id"] == "id7" and header["model_version"] == "1"
    assert header["outputs"][0] == {"name": "y", "datatype": "FP32", "shape": [2, 3], "parameters": {"binary_data_size": 24}}
    assert header["outputs"][1]["data"] == ["x"]
    assert np.frombuffer(body[n:], dtype=np.float32).tolist() == [1.0] * 6


def test_json_only_response_has_no_header_length():
    req = kserve.InferRequest(None, {}, None, {}, False, {})
    body, n = kserve.encode_infer_response("m", "1", req, {"y": np.array([[1, 2]], dtype=np.int64)})
    assert n is None
    assert json.loads(body)["outputs"][0]["data"] == [1, 2]


@pytest.mark.parametrize(
    ("body", "n", "message"),
    [
        (b"{not json", None, "failed to parse the request JSON"),
        (b'{"inputs": 3}', None, "expected an object with an 'inputs' array"),
        (*_binary_request({"inputs": [{"name": "a", "datatype": "FP32", "shape": [2, 4],
                                        "parameters": {"binary_data_size": 32}}]}, b"\0" * 20), "unexpected end of binary data"),
        (*_binary_request({"inputs": [{"name": "a", "datatype": "FP32", "shape": [2, 4],
                                        "parameters": {"binary_data_size": 16}}]}, b"\0" * 16), "unexpected total byte size 16"),
        (b'{"inputs": [{"name": "a", "datatype": "FP32", "shape": [2, 2], "data": [1, 2, 3]}]}', None, "expects 4 elements"),
        (b'{"inputs": [{"name": "a", "datatype": "FP99", "shape": [1], "data": [1]}]}', None, "invalid datatype 'FP99'"),
        (b'{"inputs": []}', 100, "outside the body"),
    ],
)
def test_malformed_requests_raise_invalid_argument(body, n, message):
    with pytest.raises(InvalidArgument, match=message):
        kserve.parse_infer_request(body, n)


def test_shared_memory_is_refused_as_unsupported():
    body = b'{"inputs": [{"name": "a", "datatype": "FP32", "shape": [1], "parameters": {"shared_memory_region": "r"}}]}'
    with pytest.raises(Unsupported):
        kserve.parse_infer_request(body, None)


def _json_input(datatype: str, data: list) -> bytes:
    return json.dumps({"inputs": [{"name": "ids", "datatype": datatype, "shape": [len(data)], "data": data}]}).encode()


@pytest.mark.parametrize(
    ("datatype", "data", "message"),
    [
        ("INT32", [0.5, 1.5], "input 'ids': value 0.5 is not a valid INT32 \\(integer types take whole numbers\\)"),
        ("INT64", [1, 2.25], "value 2.25 is not a valid INT64"),
        ("INT8", [1, 300], "value 300 is not a valid INT8 \\(outside -128..127\\)"),
        ("UINT8", [-1], "value -1 is not a valid UINT8 \\(outside 0..255\\)"),
        ("INT32", [True, False], "value True is not a valid INT32"),
        ("BOOL", [1, 0], "value 1 is not a valid BOOL"),
        ("FP16", [1.0, 70000.0], "value 70000.0 is not a valid FP16 \\(too large for FP16\\)"),
        ("FP32", ["a"], "data does not match datatype FP32"),
    ],
)
def test_json_values_that_do_not_fit_the_datatype_are_refused_not_truncated(datatype, data, message):
    with pytest.raises(InvalidArgument, match=message):
        kserve.parse_infer_request(_json_input(datatype, data), None)


@pytest.mark.parametrize(("datatype", "data", "expected"), [
    ("INT32", [1, 2.0, -3], np.array([1, 2, -3], np.int32)),  # 2.0 is a whole number
    ("FP32", [1, 2.5], np.array([1.0, 2.5], np.float32)),  # integers are valid floats
    ("BOOL", [True, False], np.array([True, False])),
    ("UINT64", [2**63], np.array([2**63], np.uint64)),
])
def test_json_values_that_fit_are_taken_exactly(datatype, data, expected):
    got = kserve.parse_infer_request(_json_input(datatype, data), None).inputs["ids"]
    assert got.dtype == expected.dtype
    np.testing.assert_array_equal(got, expected)
