"""The gRPC front end, driven by tritonclient.grpc (sync, streaming and asyncio) against a real server."""

from __future__ import annotations

import asyncio
import queue

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as aioclient
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc
from tritonclient.utils import InferenceServerException

from trainserve.serve.protocol.grpc_server import GrpcConfig
from tests.serve.inprocess import running_server
from tests.serve.tiny_models import BIAS, WEIGHT, expected_logits, make_repository


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    repo = make_repository(tmp_path_factory.mktemp("repo"), classifier_delay_us=2000)
    with running_server(repo) as (srv, ports):
        yield srv, f"127.0.0.1:{ports['grpc']}"


@pytest.fixture
def client(server):
    with grpcclient.InferenceServerClient(server[1]) as c:
        yield c


@pytest.fixture
def stub(server):
    """The raw generated stub, for messages tritonclient will not build (typed contents, broken payloads)."""
    with grpc.insecure_channel(server[1]) as channel:
        yield service_pb2_grpc.GRPCInferenceServiceStub(channel)


def infer_input(name: str, array: np.ndarray) -> grpcclient.InferInput:
    datatype = "BYTES" if array.dtype == np.object_ else grpcclient.np_to_triton_dtype(array.dtype)
    return grpcclient.InferInput(name, list(array.shape), datatype).set_data_from_numpy(array)


def status_of(call) -> tuple[str, str]:
    with pytest.raises(InferenceServerException) as info:
        call()
    return info.value.status(), info.value.message()


def x_rows(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, 4)).astype(np.float32)


def test_health_and_server_metadata(client):
    assert client.is_server_live() and client.is_server_ready()
    meta = client.get_server_metadata()
    assert meta.name == "triton" and "statistics" in meta.extensions and "trainserve" in meta.extensions and meta.version


def test_model_ready_and_metadata(client):
    assert client.is_model_ready("classifier") and client.is_model_ready("classifier", "1")
    assert not client.is_model_ready("nope") and not client.is_model_ready("broken")
    meta = client.get_model_metadata("classifier")
    assert meta.versions == ["1", "2"] and meta.platform == "onnxruntime_onnx"
    assert [(t.name, t.datatype, list(t.shape)) for t in meta.inputs] == [("input", "FP32", [-1, 4])]
    assert [t.name for t in meta.outputs] == ["logits", "probs"]
    assert status_of(lambda: client.get_model_metadata("nope"))[0] == "StatusCode.INVALID_ARGUMENT"
    assert status_of(lambda: client.get_model_metadata("classifier", "7"))[0] == "StatusCode.NOT_FOUND"
    code, message = status_of(lambda: client.get_model_metadata("broken"))
    assert code == "StatusCode.NOT_FOUND" and "'broken' has no available versions" in message


def test_model_config_and_repository_index(client, stub):
    config = client.get_model_config("classifier").config
    assert config.max_batch_size == 8 and config.input[0].name == "input" and config.HasField("dynamic_batching")
    assert client.get_model_config("ints", as_json=True)["config"]["input"][0]["data_type"] == "TYPE_INT64"
    index = {(m.name, m.version): m for m in client.get_model_repository_index().models}
    assert index[("classifier", "1")].state == "READY" and index[("classifier", "2")].state == "READY"
    assert index[("broken", "1")].state == "UNAVAILABLE" and index[("broken", "1")].reason
    ready_only = stub.RepositoryIndex(pb.RepositoryIndexRequest(ready=True))
    assert "broken" not in {m.name for m in ready_only.models}


def test_infer_raw_contents_request_id_and_outputs(client):
    x = x_rows(3)
    result = client.infer("classifier", [infer_input("input", x)], request_id="req-42")
    np.testing.assert_allclose(result.as_numpy("logits"), expected_logits(x), rtol=1e-5)
    assert result.as_numpy("probs").shape == (3, 3)
    response = result.get_response()
    assert response.id == "req-42" and response.model_name == "classifier" and response.model_version == "2"
    only = client.infer("classifier", [infer_input("input", x)], model_version="1",
                        outputs=[grpcclient.InferRequestedOutput("probs")], parameters={"tag": "t"})
    assert [o.name for o in only.get_response().outputs] == ["probs"]
    assert only.get_response().model_version == "1"
    np.testing.assert_allclose(only.as_numpy("probs").sum(axis=1), 1.0, rtol=1e-5)


def test_infer_typed_contents(stub):
    x = x_rows(2, seed=1)
    request = pb.ModelInferRequest(model_name="classifier", id="typed")
    request.inputs.add(name="input", datatype="FP32", shape=[2, 4]).contents.fp32_contents.extend(x.ravel().tolist())
    response = stub.ModelInfer(request)
    logits = grpcclient.InferResult(response).as_numpy("logits")
    np.testing.assert_allclose(logits, expected_logits(x), rtol=1e-5)
    assert response.id == "typed"


def test_infer_int64_and_bytes(client, stub):
    ids = np.array([[1, 2, 3]], dtype=np.int64)
    np.testing.assert_array_equal(client.infer("ints", [infer_input("input_ids", ids)]).as_numpy("logits"),
                                  ids.astype(np.float32) * 2)
    text = np.array([[b"hello"], ["w\u00f6rld".encode()]], dtype=np.object_)
    out = client.infer("strings", [infer_input("text", text)]).as_numpy("text_out")
    assert out.tolist() == text.tolist()
    request = pb.ModelInferRequest(model_name="strings")
    request.inputs.add(name="text", datatype="BYTES", shape=[1, 1]).contents.bytes_contents.append(b"typed")
    assert grpcclient.InferResult(stub.ModelInfer(request)).as_numpy("text_out").tolist() == [[b"typed"]]


@pytest.mark.parametrize("build, code, fragment", [
    (lambda: ("classifier", [infer_input("wrong", x_rows(1))], None), "INVALID_ARGUMENT", "unexpected inference input 'wrong'"),
    (lambda: ("classifier", [infer_input("input", np.zeros((1, 5), np.float32))], None), "INVALID_ARGUMENT", "unexpected shape"),
    (lambda: ("classifier", [infer_input("input", np.zeros((1, 4), np.float64))], None), "INVALID_ARGUMENT", "data-type is 'FP64'"),
    (lambda: ("classifier", [infer_input("input", x_rows(9))], None), "INVALID_ARGUMENT", "batch-size must be <= 8"),
    (lambda: ("classifier", [infer_input("input", x_rows(1))], [grpcclient.InferRequestedOutput("nope")]),
     "INVALID_ARGUMENT", "unexpected inference output 'nope'"),
    (lambda: ("nope", [infer_input("input", x_rows(1))], None), "INVALID_ARGUMENT", "unknown model: 'nope'"),
    (lambda: ("broken", [infer_input("input", x_rows(1))], None), "NOT_FOUND", "broken"),
])
def test_bad_requests_get_status_codes_and_server_keeps_serving(client, build, code, fragment):
    model, inputs, outputs = build()
    status, message = status_of(lambda: client.infer(model, inputs, outputs=outputs, request_id="bad-1"))
    assert status == f"StatusCode.{code}" and fragment in message
    if code == "INVALID_ARGUMENT":
        assert message.startswith("[request id: bad-1] ")
    assert client.infer("classifier", [infer_input("input", x_rows(1))]).as_numpy("logits").shape == (1, 3)


def test_malformed_payloads_are_invalid_argument(stub, client):
    good = grpcclient.InferInput("input", [2, 4], "FP32").set_data_from_numpy(x_rows(2))
    request = pb.ModelInferRequest(model_name="classifier")
    request.inputs.append(good._get_tensor())
    request.raw_input_contents.append(good._get_content()[:-3])  # truncated
    with pytest.raises(grpc.RpcError) as info:
        stub.ModelInfer(request)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "byte size mismatch" in info.value.details()
    text = grpcclient.InferInput("text", [1, 1], "BYTES").set_data_from_numpy(np.array([[b"abcdef"]], dtype=np.object_))
    request = pb.ModelInferRequest(model_name="strings")
    request.inputs.append(text._get_tensor())
    request.raw_input_contents.append(text._get_content()[:-2])
    with pytest.raises(grpc.RpcError) as info:
        stub.ModelInfer(request)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "truncated" in info.value.details()
    with pytest.raises(grpc.RpcError) as info:
        stub.RepositoryModelLoad(pb.RepositoryModelLoadRequest(model_name="classifier"))
    assert info.value.code() == grpc.StatusCode.UNIMPLEMENTED
    assert client.is_server_ready()


def test_statistics_count_requests(client):
    before = client.get_inference_statistics("classifier", "2").model_stats[0]
    for n in (1, 2, 3):
        client.infer("classifier", [infer_input("input", x_rows(n))], model_version="2")
    after = client.get_inference_statistics("classifier", "2").model_stats[0]
    assert after.name == "classifier" and after.version == "2"
    assert after.inference_stats.success.count == before.inference_stats.success.count + 3
    assert after.inference_count == before.inference_count + 6
    assert after.execution_count >= before.execution_count + 1
    assert after.inference_stats.compute_infer.ns > before.inference_stats.compute_infer.ns
    all_stats = client.get_inference_statistics().model_stats
    assert {(s.name, s.version) for s in all_stats} >= {("classifier", "1"), ("classifier", "2"), ("ints", "1")}
    assert status_of(lambda: client.get_inference_statistics("nope"))[0] == "StatusCode.INVALID_ARGUMENT"


def test_stream_infer_answers_every_request_and_reports_errors_in_stream(server):
    results: queue.Queue = queue.Queue()
    with grpcclient.InferenceServerClient(server[1]) as c:
        c.start_stream(callback=lambda result, error: results.put((result, error)))
        sent = {f"s{i}": x_rows(i + 1, seed=i) for i in range(4)}
        for request_id, x in sent.items():
            c.async_stream_infer("classifier", [infer_input("input", x)], request_id=request_id)
        c.async_stream_infer("nope", [infer_input("input", x_rows(1))], request_id="bad")
        got = [results.get(timeout=10) for _ in range(5)]
        c.stop_stream()
    errors = [e for _, e in got if e is not None]
    assert len(errors) == 1 and "unknown model: 'nope'" in errors[0].message()
    for result, error in got:
        if error is None:
            request_id = result.get_response().id
            np.testing.assert_allclose(result.as_numpy("logits"), expected_logits(sent[request_id]), rtol=1e-5)


def test_asyncio_client_concurrent_requests_each_get_their_rows(server):
    async def scenario() -> None:
        async with aioclient.InferenceServerClient(server[1]) as c:
            assert await c.is_server_live() and await c.is_server_ready()
            assert await c.is_model_ready("classifier")
            assert (await c.get_model_metadata("classifier")).name == "classifier"
            xs = [x_rows(1 + i % 3, seed=100 + i) for i in range(24)]
            before = (await c.get_inference_statistics("classifier", "2")).model_stats[0]
            results = await asyncio.gather(*(
                c.infer("classifier", [aioclient.InferInput("input", list(x.shape), "FP32").set_data_from_numpy(x)],
                        request_id=str(i)) for i, x in enumerate(xs)))
            for i, (x, result) in enumerate(zip(xs, results)):
                assert result.get_response().id == str(i)
                np.testing.assert_allclose(result.as_numpy("logits"), expected_logits(x), rtol=1e-5)
            after = (await c.get_inference_statistics("classifier", "2")).model_stats[0]
            assert after.inference_count - before.inference_count == sum(len(x) for x in xs)
            with pytest.raises(InferenceServerException) as info:
                await c.get_model_config("nope")
            assert info.value.status() == "StatusCode.INVALID_ARGUMENT"

    asyncio.run(scenario())


def slow_classifier_onnx(path, spins: int = 5000) -> None:
    """The classifier's logits, after an ONNX Loop that spins `spins` times (~5-10 us each): a slow model."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    scalar = lambda name, t: helper.make_tensor_value_info(name, t, [])  # noqa: E731
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]), helper.make_node("Add", ["v_in", "one"], ["v_out"])],
        "spin", [scalar("i", TensorProto.INT64), scalar("cond_in", TensorProto.BOOL), scalar("v_in", TensorProto.FLOAT)],
        [scalar("cond_out", TensorProto.BOOL), scalar("v_out", TensorProto.FLOAT)],
        [numpy_helper.from_array(np.array(1.0, np.float32), "one")])
    graph = helper.make_graph(
        [helper.make_node("Loop", ["n", "", "zero"], ["spun"], body=body),
         helper.make_node("Mul", ["spun", "zero"], ["nothing"]),  # keeps the loop in the graph, adds 0
         helper.make_node("MatMul", ["input", "W"], ["mm"]), helper.make_node("Add", ["mm", "b"], ["mmb"]),
         helper.make_node("Add", ["mmb", "nothing"], ["logits"])],
        "slow", [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 3])],
        [numpy_helper.from_array(WEIGHT, "W"), numpy_helper.from_array(BIAS, "b"),
         numpy_helper.from_array(np.array(spins, np.int64), "n"), numpy_helper.from_array(np.array(0.0, np.float32), "zero")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path.parent.mkdir(parents=True)
    onnx.save(model, str(path))


def test_queue_full_is_unavailable_and_oversized_message_is_refused(tmp_path):
    slow_classifier_onnx(tmp_path / "slow" / "1" / "model.onnx")
    # runs on the instance's thread (idle_inline_max_us 0): a burst's first run on the loop, as a CPU model's lone
    # request may take, reads no request meanwhile, and one run at a time never fills the queue this test fills
    (tmp_path / "slow" / "config.pbtxt").write_text(
        'max_batch_size: 8\ninput [ { name: "input" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
        'output [ { name: "logits" data_type: TYPE_FP32 dims: [ 3 ] } ]\ndynamic_batching { }\n'
        'parameters { key: "idle_inline_max_us" value: { string_value: "0" } }\n')
    with running_server(tmp_path, max_queue_size=2, max_body_bytes=4096) as (_, ports):
        url = f"127.0.0.1:{ports['grpc']}"

        async def burst() -> list[BaseException | object]:
            async with aioclient.InferenceServerClient(url) as c:
                x = x_rows(8)  # a full batch each: the worker takes one, two may wait, the rest are refused
                inp = aioclient.InferInput("input", [8, 4], "FP32").set_data_from_numpy(x)
                return await asyncio.gather(*(c.infer("slow", [inp]) for _ in range(12)), return_exceptions=True)

        outcomes = asyncio.run(burst())
        refused = [o for o in outcomes if isinstance(o, InferenceServerException)]
        assert refused and all(e.status() == "StatusCode.UNAVAILABLE" for e in refused)
        assert "exceeds maximum queue size of 2" in refused[0].message()
        assert len(refused) < len(outcomes)
        with grpcclient.InferenceServerClient(url) as c:
            big = np.zeros((8, 4 * 64), np.float32)  # 8 KiB > the 4 KiB limit
            status, _ = status_of(lambda: c.infer("slow", [infer_input("input", big)]))
            assert status == "StatusCode.RESOURCE_EXHAUSTED"
            assert c.infer("slow", [infer_input("input", x_rows(1))]).as_numpy("logits").shape == (1, 3)


def test_requests_arriving_while_a_run_is_busy_form_the_next_batch(tmp_path):
    slow_classifier_onnx(tmp_path / "slow" / "1" / "model.onnx")  # a run takes tens of ms: the rest queue meanwhile
    (tmp_path / "slow" / "config.pbtxt").write_text(  # on the thread, as in the test above
        'max_batch_size: 8\ninput [ { name: "input" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
        'output [ { name: "logits" data_type: TYPE_FP32 dims: [ 3 ] } ]\ndynamic_batching { }\n'
        'parameters { key: "idle_inline_max_us" value: { string_value: "0" } }\n')
    with running_server(tmp_path) as (_, ports):
        async def burst() -> list:
            async with aioclient.InferenceServerClient(f"127.0.0.1:{ports['grpc']}") as c:
                xs = [x_rows(1 + i % 2, seed=i) for i in range(8)]
                results = await asyncio.gather(*(c.infer("slow", [aioclient.InferInput(
                    "input", list(x.shape), "FP32").set_data_from_numpy(x)]) for x in xs))
                stats = (await c.get_inference_statistics("slow")).model_stats[0]
                return xs, results, stats

        xs, results, stats = asyncio.run(burst())
    for x, r in zip(xs, results):
        np.testing.assert_allclose(r.as_numpy("logits"), expected_logits(x), rtol=1e-5)
    assert stats.inference_count == sum(len(x) for x in xs)
    assert stats.execution_count < len(xs), "requests that queued behind a run were not batched together"


def test_grpc_config_validates_fields():
    with pytest.raises(ValueError, match="port=70000"):
        GrpcConfig(port=70000)
    with pytest.raises(ValueError, match="max_message_bytes"):
        GrpcConfig(max_message_bytes=10)


def test_a_taken_port_is_an_os_error(server):
    from trainserve.serve.protocol.grpc_server import GrpcServer

    port = int(server[1].rsplit(":", 1)[1])

    async def scenario() -> None:
        with pytest.raises(OSError, match=f"127.0.0.1:{port}"):
            await GrpcServer(core=None, config=GrpcConfig(port=port)).start()

    asyncio.run(scenario())


def test_every_service_method_is_served_through_the_generic_handler(stub):
    """The service is registered as a generic handler only (grpc_server._generic_handlers): no method may be lost."""
    from dataclasses import dataclass

    from trainserve.serve.protocol.grpc_server import InferenceServicer, _generic_handlers

    @dataclass
    class Details(grpc.HandlerCallDetails):
        method: str
        invocation_metadata: tuple = ()

    handlers = _generic_handlers(InferenceServicer(core=None))
    service = pb.DESCRIPTOR.services_by_name["GRPCInferenceService"]
    for method in service.methods:
        path = f"/{service.full_name}/{method.name}"
        assert any(h.service(Details(path)) is not None for h in handlers), f"{path} has no handler"
    # and through the real server: a served-but-unsupported RPC answers with this server's own message
    with pytest.raises(grpc.RpcError) as info:
        stub.RepositoryModelLoad(pb.RepositoryModelLoadRequest(model_name="classifier"))
    assert info.value.code() == grpc.StatusCode.UNIMPLEMENTED
    assert "RepositoryModelLoad is not supported by this server" in info.value.details()


def _infer_request_bytes(rows: np.ndarray, request_id: str) -> bytes:
    req = pb.ModelInferRequest(model_name="classifier", id=request_id)
    req.inputs.add(name="input", datatype="FP32", shape=list(rows.shape))
    req.raw_input_contents.append(rows.tobytes())
    return req.SerializeToString()


BROKEN = b"\x0a\xff\xff\xff\xff\x0f"  # field 1 (model_name) announcing a length far past the message's end


def test_a_malformed_unary_message_is_invalid_argument(server, client):
    with grpc.insecure_channel(server[1]) as channel:
        call = channel.unary_unary("/inference.GRPCInferenceService/ModelInfer")  # raw bytes in and out
        with pytest.raises(grpc.RpcError) as info:
            call(BROKEN, timeout=10)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert info.value.details().startswith("failed to parse the request message")
    assert client.is_server_ready()


def test_a_malformed_message_on_a_stream_gets_an_error_response_and_the_stream_goes_on(server):
    a, b = x_rows(1, seed=1), x_rows(2, seed=2)
    messages = [_infer_request_bytes(a, "first"), BROKEN, _infer_request_bytes(b, "after")]
    with grpc.insecure_channel(server[1]) as channel:
        call = channel.stream_stream("/inference.GRPCInferenceService/ModelStreamInfer",
                                     response_deserializer=pb.ModelStreamInferResponse.FromString)
        responses = list(call(iter(messages), timeout=20))
    assert len(responses) == 3  # nothing dropped after the broken message, and the stream ended OK
    errors = [r for r in responses if r.error_message]
    assert len(errors) == 1 and errors[0].error_message.startswith("failed to parse the request message")
    by_id = {r.infer_response.id: r.infer_response for r in responses if not r.error_message}
    for rid, x in (("first", a), ("after", b)):
        logits = np.frombuffer(by_id[rid].raw_output_contents[0], np.float32).reshape(len(x), -1)
        np.testing.assert_allclose(logits, expected_logits(x), rtol=1e-5)
