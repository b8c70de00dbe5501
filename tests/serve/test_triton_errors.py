"""Programs written against Triton read the same answers from the embedded server: one case per row of the
error tables in docs/serving.md and docs/grpc.md, sent by the real tritonclient over HTTP and gRPC to the
real server, which must answer with Triton's status code and Triton's words."""

from __future__ import annotations

import json

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc
from tritonclient.utils import InferenceServerException

from trainserve.loadtest.model_info import EMBEDDED_EXTENSION
from trainserve.serve.engine.server_core import EMBEDDED_EXTENSION as SERVED_MARKER
from tests.serve.conftest import ThreadServer

# (case, model, version, inputs as (name, array), requested outputs, HTTP status, gRPC code, Triton's message)
CASES = [
    ("unknown model", "nope", "", [("input", np.ones((1, 4), np.float32))], None, "400", "INVALID_ARGUMENT",
     "Request for unknown model: 'nope' is not found"),
    ("unknown version", "classifier", "9", [("input", np.ones((1, 4), np.float32))], None, "404", "NOT_FOUND",
     "Request for unknown model: 'classifier' version 9 is not found"),
    ("no version available", "broken", "", [("input", np.ones((1, 4), np.float32))], None, "404", "NOT_FOUND",
     "Request for unknown model: 'broken' has no available versions"),
    # the same model with its version named: UNAVAILABLE, as Triton's GetModel (docs/serving.md says both)
    ("version failed to load", "broken", "1", [("input", np.ones((1, 4), np.float32))], None, "503", "UNAVAILABLE",
     "Request for unknown model: 'broken' version 1 is not at ready state"),
    ("version not a number", "classifier", "abc", [("input", np.ones((1, 4), np.float32))], None, "400",
     "INVALID_ARGUMENT",
     "failed to get model version from specified version string 'abc' (details: stol), version should be an "
     "integral value > 0"),
    ("negative version", "classifier", "-1", [("input", np.ones((1, 4), np.float32))], None, "400",
     "INVALID_ARGUMENT", "invalid model version specified '-1' , version should be an integral value > 0"),
    ("unknown input", "classifier", "", [("wrong", np.ones((1, 4), np.float32))], None, "400", "INVALID_ARGUMENT",
     "unexpected inference input 'wrong' for model 'classifier'"),
    ("unknown output", "classifier", "", [("input", np.ones((1, 4), np.float32))], "nope", "400", "INVALID_ARGUMENT",
     "unexpected inference output 'nope' for model 'classifier'"),
    ("missing input", "classifier", "", [], None, "400", "INVALID_ARGUMENT",
     "expected 1 inputs but got 0 inputs for model 'classifier'. Got input(s) [], but missing required input(s) "
     "['input']. Please provide all required input(s)."),
    ("wrong datatype", "classifier", "", [("input", np.ones((1, 4), np.float64))], None, "400", "INVALID_ARGUMENT",
     "inference input 'input' data-type is 'FP64', but model 'classifier' expects 'FP32'"),
    ("wrong shape", "classifier", "", [("input", np.ones((1, 5), np.float32))], None, "400", "INVALID_ARGUMENT",
     "unexpected shape for input 'input' for model 'classifier'. Expected [-1,4], got [1,5]"),
]


@pytest.fixture(scope="module")
def server(model_repo):
    srv = ThreadServer(model_repo, server_options={"grpc_port": 0}).start()
    try:
        yield srv
    finally:
        srv.stop()


def _inputs(module, arrays):
    out = []
    for name, array in arrays:
        i = module.InferInput(name, list(array.shape), "FP64" if array.dtype == np.float64 else "FP32")
        i.set_data_from_numpy(array)
        out.append(i)
    return out


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_http_answers_as_triton(server, case):
    _, model, version, arrays, output, status, _, message = case
    client = httpclient.InferenceServerClient(server.http_url)
    try:
        outputs = [httpclient.InferRequestedOutput(output)] if output else None
        with pytest.raises(InferenceServerException) as info:
            client.infer(model, _inputs(httpclient, arrays), model_version=version, outputs=outputs)
        assert (info.value.status(), info.value.message()) == (status, message)
        assert client.is_server_ready()
    finally:
        client.close()


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_grpc_answers_as_triton(server, case):
    _, model, version, arrays, output, _, code, message = case
    with grpcclient.InferenceServerClient(f"127.0.0.1:{server.ports['grpc']}") as client:
        outputs = [grpcclient.InferRequestedOutput(output)] if output else None
        with pytest.raises(InferenceServerException) as info:
            client.infer(model, _inputs(grpcclient, arrays), model_version=version, outputs=outputs)
        assert (info.value.status(), info.value.message()) == (f"StatusCode.{code}", message)
        assert client.is_server_ready()


def test_grpc_typed_contents_and_raw_contents_together_are_refused_as_triton_does(server):
    x = np.ones((1, 4), np.float32)
    tensor = pb.ModelInferRequest.InferInputTensor(name="input", datatype="FP32", shape=[1, 4])
    tensor.contents.fp32_contents.extend(x.ravel().tolist())
    request = pb.ModelInferRequest(model_name="classifier", inputs=[tensor], raw_input_contents=[x.tobytes()])
    with grpc.insecure_channel(f"127.0.0.1:{server.ports['grpc']}") as channel:
        with pytest.raises(grpc.RpcError) as info:
            service_pb2_grpc.GRPCInferenceServiceStub(channel).ModelInfer(request)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert info.value.details() == ("contents field must not be specified when using raw_input_contents for 'input' "
                                    "for model 'classifier'")


def test_http_malformed_json_uses_tritons_prefix(server):
    import http.client

    conn = http.client.HTTPConnection("127.0.0.1", server.ports["http"], timeout=10)
    try:
        conn.request("POST", "/v2/models/classifier/infer", body=b'{"inputs": [')
        r = conn.getresponse()
        error = json.loads(r.read())["error"]
        assert r.status == 400 and error == "failed to parse the request JSON buffer: Expecting value at 12"
    finally:
        conn.close()


def test_server_metadata_says_triton_and_loadtest_still_tells_the_servers_apart(server):
    assert SERVED_MARKER == EMBEDDED_EXTENSION  # the two stages agree on the marker
    client = httpclient.InferenceServerClient(server.http_url)
    try:
        md = client.get_server_metadata()
    finally:
        client.close()
    assert md["name"] == "triton" and md["version"] == "0.1.0" and EMBEDDED_EXTENSION in md["extensions"]
    with grpcclient.InferenceServerClient(f"127.0.0.1:{server.ports['grpc']}") as c:
        meta = c.get_server_metadata()
    assert meta.name == "triton" and EMBEDDED_EXTENSION in meta.extensions


def _grpc_refusal(server, request) -> tuple:
    with grpc.insecure_channel(f"127.0.0.1:{server.ports['grpc']}") as channel:
        with pytest.raises(grpc.RpcError) as info:
            service_pb2_grpc.GRPCInferenceServiceStub(channel).ModelInfer(request)
    return info.value.code(), info.value.details()


def test_grpc_checks_run_in_tritons_order(server):
    """Triton's InferGRPCToInput checks input by input, so typed contents beside raw ones are
    refused before the raw entries are counted, and a missing raw entry is named by its input."""
    x = np.ones((1, 4), np.float32)
    typed = pb.ModelInferRequest.InferInputTensor(name="INPUT0", datatype="FP32", shape=[1, 4])
    typed.contents.fp32_contents.extend(x.ravel().tolist())
    second = pb.ModelInferRequest.InferInputTensor(name="INPUT1", datatype="FP32", shape=[1, 4])
    # typed first input, one raw entry for two inputs: the contents check comes first (not the count)
    request = pb.ModelInferRequest(model_name="classifier", inputs=[typed, second], raw_input_contents=[x.tobytes()])
    assert _grpc_refusal(server, request) == (grpc.StatusCode.INVALID_ARGUMENT, (
        "contents field must not be specified when using raw_input_contents for 'INPUT0' for model 'classifier'"))
    # two raw inputs, one raw entry: the input left without data is named
    first = pb.ModelInferRequest.InferInputTensor(name="INPUT0", datatype="FP32", shape=[1, 4])
    request = pb.ModelInferRequest(model_name="classifier", inputs=[first, second], raw_input_contents=[x.tobytes()])
    assert _grpc_refusal(server, request) == (grpc.StatusCode.INVALID_ARGUMENT, (
        "unable to find data for input tensor 'INPUT1' for model 'classifier' in request."))
    # typed contents of another type than the datatype
    wrong = pb.ModelInferRequest.InferInputTensor(name="input", datatype="FP32", shape=[1, 4])
    wrong.contents.int64_contents.extend([1, 2, 3, 4])
    request = pb.ModelInferRequest(model_name="classifier", inputs=[wrong])
    assert _grpc_refusal(server, request) == (grpc.StatusCode.INVALID_ARGUMENT, (
        "unexpected explicit tensor data for input tensor 'input' for model 'classifier' of type 'INT64', "
        "expected datatype 'FP32'"))
