"""The protobuf <-> numpy codec, fed with requests built by tritonclient itself."""

from __future__ import annotations

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc._infer_result import InferResult
from tritonclient.grpc._utils import _get_inference_request

from trainserve.serve.request_errors import InvalidArgument
from trainserve.serve.protocol.grpc_codec import (
    CodecError,
    decode_inputs,
    encode_bytes_tensor,
    encode_response,
    fill_params,
    params_to_dict,
    requested_outputs,
)


def client_request(arrays: dict[str, np.ndarray], outputs: list[str] | None = None, **params) -> pb.ModelInferRequest:
    """The exact message tritonclient.grpc sends for these arrays (raw contents)."""
    inputs = []
    for name, array in arrays.items():
        datatype = "BYTES" if array.dtype == np.object_ else grpcclient.np_to_triton_dtype(array.dtype)
        inputs.append(grpcclient.InferInput(name, list(array.shape), datatype).set_data_from_numpy(array))
    outs = [grpcclient.InferRequestedOutput(n) for n in outputs] if outputs else None
    return _get_inference_request(model_name="m", inputs=inputs, model_version="", request_id="r-1", outputs=outs,
                                  sequence_id=0, sequence_start=False, sequence_end=False, priority=0, timeout=None,
                                  parameters=params or None)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16, np.int8, np.int32, np.int64, np.uint8,
                                   np.uint64, np.bool_])
def test_raw_round_trip_every_numeric_dtype(dtype):
    array = (np.arange(24).reshape(2, 3, 4) % 5).astype(dtype)
    decoded = decode_inputs(client_request({"x": array}))
    assert decoded["x"].dtype == np.dtype(dtype)
    np.testing.assert_array_equal(decoded["x"], array)


def test_bytes_tensor_raw_round_trip_including_empty_and_utf8():
    array = np.array([[b"", b"abc"], ["h\u00e9".encode(), b"\x00\x01"]], dtype=np.object_)
    decoded = decode_inputs(client_request({"s": array}))["s"]
    assert decoded.shape == (2, 2)
    assert decoded.tolist() == array.tolist()


def test_typed_contents_decode():
    request = pb.ModelInferRequest(model_name="m")
    t = request.inputs.add(name="f", datatype="FP32", shape=[2, 2])
    t.contents.fp32_contents.extend([1.0, 2.0, 3.0, 4.5])
    t = request.inputs.add(name="i", datatype="INT16", shape=[3])
    t.contents.int_contents.extend([-1, 0, 7])
    t = request.inputs.add(name="b", datatype="BYTES", shape=[1, 2])
    t.contents.bytes_contents.extend([b"x", b"yz"])
    decoded = decode_inputs(request)
    np.testing.assert_array_equal(decoded["f"], np.array([[1, 2], [3, 4.5]], np.float32))
    assert decoded["i"].dtype == np.int16 and decoded["i"].tolist() == [-1, 0, 7]
    assert decoded["b"].tolist() == [[b"x", b"yz"]]


@pytest.mark.parametrize("mutate, message", [
    (lambda r: r.raw_input_contents.__setitem__(0, r.raw_input_contents[0][:-4]), "byte size mismatch"),
    (lambda r: r.raw_input_contents.append(b"extra"), "one per input"),
    (lambda r: setattr(r.inputs[0], "datatype", "FP8"), "unknown datatype 'FP8'"),
    (lambda r: r.inputs[0].shape.__setitem__(0, -1), "negative dimension"),
])
def test_malformed_raw_requests_raise_codec_error(mutate, message):
    request = client_request({"x": np.zeros((2, 3), np.float32)})
    mutate(request)
    with pytest.raises(CodecError, match=message):
        decode_inputs(request)


def test_truncated_bytes_tensor_and_wrong_count():
    request = client_request({"s": np.array([b"abc", b"de"], dtype=np.object_)})
    good = request.raw_input_contents[0]
    request.raw_input_contents[0] = good[:-1]
    with pytest.raises(InvalidArgument, match="element 1 is truncated"):
        decode_inputs(request)
    request.raw_input_contents[0] = good[:2]
    with pytest.raises(InvalidArgument, match="expected 2 elements, found 0"):
        decode_inputs(request)
    request.raw_input_contents[0] = good + encode_bytes_tensor(np.array([b"f"], dtype=np.object_))
    with pytest.raises(InvalidArgument, match="5 bytes beyond its 2 BYTES elements"):
        decode_inputs(request)


def test_typed_contents_wrong_count_and_fp16_needs_raw():
    request = pb.ModelInferRequest(model_name="m")
    request.inputs.add(name="f", datatype="FP32", shape=[3]).contents.fp32_contents.extend([1.0])
    with pytest.raises(CodecError, match="expected 3 .* got 1 in fp32_contents"):
        decode_inputs(request)
    request = pb.ModelInferRequest(model_name="m")
    request.inputs.add(name="h", datatype="FP16", shape=[1])
    with pytest.raises(CodecError, match=r"^unable to find data for input tensor 'h' for model 'm' in request\.$"):
        decode_inputs(request)
    request.inputs[0].contents.SetInParent()  # a contents field with no values: FP16 has no typed field
    with pytest.raises(CodecError, match="datatype FP16 must be sent in raw_input_contents"):
        decode_inputs(request)


@pytest.mark.parametrize("fill, message", [
    # Triton's order: the typed field's type before anything else about it, then a second field
    (lambda c: c.fp32_contents.extend([1.0]),
     "unexpected explicit tensor data for input tensor 'i' for model 'm' of type 'FP32', expected datatype 'INT64'"),
    (lambda c: (c.int64_contents.extend([1]), c.fp32_contents.extend([1.0])),
     "unexpected explicit tensor data for input tensor 'i' for model 'm', binary data was already supplied."),
])
def test_typed_contents_of_another_type_are_refused_in_tritons_words(fill, message):
    request = pb.ModelInferRequest(model_name="m")
    fill(request.inputs.add(name="i", datatype="INT64", shape=[1]).contents)
    with pytest.raises(CodecError) as info:
        decode_inputs(request)
    assert str(info.value) == message


def test_requested_outputs_and_parameters():
    request = client_request({"x": np.zeros(1, np.float32)}, outputs=["logits"], tag="a", n=3, flag=True, w=0.5)
    assert requested_outputs(request) == ["logits"]
    assert requested_outputs(client_request({"x": np.zeros(1, np.float32)})) is None
    assert params_to_dict(request.parameters) == {"tag": "a", "n": 3, "flag": True, "w": 0.5}
    response = pb.ModelInferResponse()
    fill_params(response.parameters, {"flag": True, "n": 3, "w": 0.5, "tag": "a"})
    assert response.parameters["flag"].WhichOneof("parameter_choice") == "bool_param"
    assert params_to_dict(response.parameters) == {"flag": True, "n": 3, "w": 0.5, "tag": "a"}


def test_response_reads_back_through_tritonclient():
    logits = np.random.default_rng(0).standard_normal((4, 10)).astype(np.float32)
    labels = np.array([b"cat", b"", b"dog", b"\xff"], dtype=np.object_)
    response = encode_response("m", "1", "r-1", {"logits": logits, "labels": labels}, {"batch": 4})
    result = InferResult(response)
    np.testing.assert_array_equal(result.as_numpy("logits"), logits)
    assert result.as_numpy("labels").tolist() == labels.tolist()
    assert result.get_response().id == "r-1" and result.get_response().model_version == "1"
    assert [o.datatype for o in response.outputs] == ["FP32", "BYTES"]
