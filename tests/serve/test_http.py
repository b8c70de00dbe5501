"""The HTTP front end, driven by the real tritonclient (sync and asyncio) and by raw malformed requests."""

from __future__ import annotations

import asyncio
import http.client
import json
import time

import numpy as np
import pytest
import tritonclient.http as httpclient
import tritonclient.http.aio as aioclient
from tritonclient.utils import InferenceServerException

from tests.serve.conftest import ThreadServer
from tests.serve.tiny_models import classifier_config, classifier_onnx, expected_logits


@pytest.fixture(scope="module")
def client(server):
    c = httpclient.InferenceServerClient(server.http_url)
    yield c
    c.close()


def _input(x: np.ndarray, binary: bool = True) -> httpclient.InferInput:
    i = httpclient.InferInput("input", list(x.shape), "FP32")
    i.set_data_from_numpy(x, binary_data=binary)
    return i


def _raw(server, method: str, path: str, body: bytes = b"", headers: dict | None = None) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", server.ports["http"], timeout=10)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def test_health_and_server_metadata(client):
    assert client.is_server_live() and client.is_server_ready()
    md = client.get_server_metadata()
    assert md["name"] == "triton" and "binary_tensor_data" in md["extensions"] and "trainserve" in md["extensions"]


def test_model_endpoints(client):
    md = client.get_model_metadata("classifier")
    assert md["versions"] == ["1", "2"] and md["inputs"] == [{"name": "input", "datatype": "FP32", "shape": [-1, 4]}]
    assert client.get_model_metadata("classifier", "1")["name"] == "classifier"
    assert client.is_model_ready("classifier") and client.is_model_ready("classifier", "2")
    assert not client.is_model_ready("broken") and not client.is_model_ready("nope")
    config = client.get_model_config("classifier")
    assert config["max_batch_size"] == 8 and config["input"][0]["dims"] == [4]
    assert config["dynamic_batching"]["max_queue_delay_microseconds"] == 2000
    assert client.get_model_config("ints", "1")["input"][0]["data_type"] == "TYPE_INT64"
    index = {(m["name"], m["version"]): m for m in client.get_model_repository_index()}
    assert index[("classifier", "1")]["state"] == "READY"
    assert index[("broken", "1")]["state"] == "UNAVAILABLE" and "model.onnx" in index[("broken", "1")]["reason"]


def test_infer_binary_and_json_with_requested_outputs_and_request_id(client):
    x = np.random.default_rng(1).random((3, 4), dtype=np.float32)
    r = client.infer("classifier", [_input(x)], request_id="req-42")
    assert r.get_response()["id"] == "req-42" and r.get_response()["model_version"] == "2"
    np.testing.assert_allclose(r.as_numpy("logits"), expected_logits(x), rtol=1e-5)
    r = client.infer("classifier", [_input(x, binary=False)], model_version="1",
                     outputs=[httpclient.InferRequestedOutput("probs", binary_data=False)])
    assert [o["name"] for o in r.get_response()["outputs"]] == ["probs"]
    assert "data" in r.get_response()["outputs"][0] and r.as_numpy("logits") is None
    np.testing.assert_allclose(r.as_numpy("probs").sum(axis=1), 1.0, rtol=1e-5)


def test_int64_and_bytes_tensors(client):
    ids = httpclient.InferInput("input_ids", [2, 3], "INT64")
    ids.set_data_from_numpy(np.arange(6, dtype=np.int64).reshape(2, 3))
    assert client.infer("ints", [ids]).as_numpy("logits").tolist() == [[0, 2, 4], [6, 8, 10]]
    text = np.array([["héllo".encode()], [b""]], dtype=object)
    for binary in (True, False):
        t = httpclient.InferInput("text", [2, 1], "BYTES")
        t.set_data_from_numpy(text, binary_data=binary)
        out = client.infer("strings", [t], outputs=[httpclient.InferRequestedOutput("text_out", binary_data=binary)])
        got = out.as_numpy("text_out").reshape(-1).tolist()
        assert [g if isinstance(g, bytes) else g.encode() for g in got] == ["héllo".encode(), b""]


def test_statistics_endpoint(client):
    client.infer("classifier", [_input(np.ones((2, 4), np.float32))], model_version="1")
    stats = client.get_inference_statistics("classifier", "1")["model_stats"][0]
    assert stats["name"] == "classifier" and stats["version"] == "1"
    assert stats["inference_count"] >= 2 and stats["inference_stats"]["success"]["count"] >= 1
    assert {s["name"] for s in client.get_inference_statistics()["model_stats"]} == {"classifier", "ints", "strings"}


@pytest.mark.parametrize(
    ("call", "status", "message"),
    [
        (lambda c: c.infer("nope", [_input(np.ones((1, 4), np.float32))]), "400", "unknown model: 'nope'"),
        (lambda c: c.infer("classifier", [_input(np.ones((1, 4), np.float32))], model_version="9"), "404", "version 9 is not found"),
        (lambda c: c.infer("broken", [_input(np.ones((1, 4), np.float32))]), "404", "has no available versions"),
        (lambda c: c.infer("classifier", [_input(np.ones((1, 5), np.float32))]), "400", "unexpected shape for input 'input'"),
        (lambda c: c.infer("classifier", [_input(np.ones((9, 4), np.float32))]), "400", "batch-size must be <= 8"),
        (lambda c: c.get_model_metadata("nope"), "400", "unknown model"),
        (lambda c: c.unload_model("classifier"), "501", "not supported"),
    ],
)
def test_errors_have_triton_status_and_message(client, call, status, message):
    with pytest.raises(InferenceServerException) as info:
        call(client)
    assert info.value.status() == status and message in info.value.message()
    assert client.is_server_ready()


def test_wrong_name_and_dtype(client):
    i = httpclient.InferInput("wrong", [1, 4], "FP32")
    i.set_data_from_numpy(np.ones((1, 4), np.float32))
    with pytest.raises(InferenceServerException, match="unexpected inference input 'wrong'"):
        client.infer("classifier", [i])
    i = httpclient.InferInput("input", [1, 4], "FP64")
    i.set_data_from_numpy(np.ones((1, 4), np.float64))
    with pytest.raises(InferenceServerException, match="data-type is 'FP64', but model 'classifier' expects 'FP32'"):
        client.infer("classifier", [i])


def test_malformed_and_truncated_bodies_get_400_and_the_server_keeps_serving(server, client):
    status, body = _raw(server, "POST", "/v2/models/classifier/infer", b'{"inputs": [')
    assert status == 400 and "failed to parse the request JSON" in json.loads(body)["error"]
    header = json.dumps({"inputs": [{"name": "input", "datatype": "FP32", "shape": [2, 4],
                                     "parameters": {"binary_data_size": 32}}]}).encode()
    status, body = _raw(server, "POST", "/v2/models/classifier/infer", header + b"\0" * 10,
                        {"Inference-Header-Content-Length": str(len(header))})
    assert status == 400 and "unexpected end of binary data" in json.loads(body)["error"]
    status, body = _raw(server, "GET", "/v2/nothing/here")
    assert status == 404 and "error" in json.loads(body)
    status, body = _raw(server, "POST", "/v2/models/classifier/infer", b'{"inputs": ' + b"[" * 100_000 + b"]" * 100_000 + b"}")
    assert (status, json.loads(body)["error"]) == (400, "failed to parse the request JSON buffer: it is nested too deeply")
    assert client.infer("classifier", [_input(np.ones((1, 4), np.float32))]).as_numpy("logits").shape == (1, 3)


@pytest.mark.parametrize(("method", "path", "allow"), [
    ("GET", "/v2/models/classifier/infer", "POST"),
    ("PUT", "/v2/models/classifier/versions/1/infer", "POST"),
    ("POST", "/v2/models/classifier", "GET"),
    ("DELETE", "/v2/models/classifier/config", "GET"),
    ("POST", "/v2/health/ready", "GET"),
    ("GET", "/v2/repository/index", "POST"),
    ("GET", "/v2/repository/models/classifier/load", "POST"),
])
def test_a_known_route_with_another_method_is_405_with_allow(server, client, method, path, allow):
    conn = http.client.HTTPConnection("127.0.0.1", server.ports["http"], timeout=10)
    try:
        conn.request(method, path)
        resp = conn.getresponse()
        body = resp.read()
    finally:
        conn.close()
    assert (resp.status, resp.getheader("Allow")) == (405, allow)
    assert json.loads(body)["error"] == f"Method Not Allowed: {method} {path} (allowed: {allow})"
    assert client.is_server_ready()  # and the server keeps serving


def test_a_body_that_never_finishes_is_408_and_closed_and_the_index_checks_its_length(model_repo):
    import socket
    import time

    srv = ThreadServer(model_repo, server_options={"max_body_bytes": 4096, "body_timeout_s": 0.5}).start()
    try:
        # POST /v2/repository/index goes through aiohttp: 1,000 bytes announced, 10 sent, then silence
        with socket.create_connection(("127.0.0.1", srv.ports["http"]), timeout=5) as s:
            s.sendall(b"POST /v2/repository/index HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n" + b"{" * 10)
            t0 = time.monotonic()
            answer = b""
            while chunk := s.recv(65536):  # until the server closes the connection
                answer += chunk
            took = time.monotonic() - t0
        assert answer.startswith(b"HTTP/1.1 408") and b"did not arrive within 0.5 s" in answer
        assert took < 4  # the 0.5 s deadline, then at most LINGER_S (2 s) before the close
        status, body = _raw(srv, "POST", "/v2/repository/index", b" " * 5000)  # over --max-body-bytes
        assert status == 413 and "exceeds the server's limit of 4096 bytes" in json.loads(body)["error"]
        status, _ = _raw(srv, "POST", "/v2/repository/index", b"{}")
        assert status == 200  # and it keeps serving
    finally:
        srv.stop()


def test_body_over_the_limit_is_refused_with_413(model_repo):
    srv = ThreadServer(model_repo, server_options={"max_body_bytes": 4096}).start()
    try:
        big = np.ones((8, 4), np.float32)
        header = json.dumps({"inputs": [{"name": "input", "datatype": "FP32", "shape": [8, 4], "data": big.tolist()}]})
        status, body = _raw(srv, "POST", "/v2/models/classifier/infer", (header + " " * 5000).encode())
        assert status == 413 and "exceeds the server's limit of 4096 bytes" in json.loads(body)["error"]
        status, _ = _raw(srv, "POST", "/v2/models/classifier/infer", header.encode())
        assert status == 200
    finally:
        srv.stop()


def test_async_clients_are_batched_and_each_gets_its_rows(tmp_path):
    classifier_onnx(tmp_path / "m" / "1" / "model.onnx")
    (tmp_path / "m" / "config.pbtxt").write_text(classifier_config("m", delay_us=20_000))
    srv = ThreadServer(tmp_path).start()
    xs = [np.full((1 + i % 3, 4), i, np.float32) for i in range(16)]

    async def go():
        client = aioclient.InferenceServerClient(srv.http_url)
        try:
            async def one(x):
                i = aioclient.InferInput("input", list(x.shape), "FP32")
                i.set_data_from_numpy(x)
                return (await client.infer("m", [i])).as_numpy("logits")

            return await asyncio.gather(*(one(x) for x in xs))
        finally:
            await client.close()

    try:
        results = asyncio.run(go())
        for x, r in zip(xs, results):
            np.testing.assert_allclose(r, expected_logits(x), rtol=1e-5)
        stats = srv.core.statistics("m")[0]
        assert stats.inference_count == sum(len(x) for x in xs)
        assert stats.execution_count < len(xs)
    finally:
        srv.stop()


def test_queue_full_answers_503_over_http(tmp_path, monkeypatch):
    classifier_onnx(tmp_path / "m" / "1" / "model.onnx")
    (tmp_path / "m" / "config.pbtxt").write_text(classifier_config("m", max_batch_size=1))
    # Each run takes 0.3 s, so while the first runs every later request must wait in the queue:
    # two fit, the rest are refused, however slowly the client's requests arrive.
    from trainserve.serve.model.sessions import LoadedModel

    run = LoadedModel.run

    def slow_run(self, *args, **kwargs):
        time.sleep(0.3)
        return run(self, *args, **kwargs)

    monkeypatch.setattr(LoadedModel, "run", slow_run)
    srv = ThreadServer(tmp_path, core_options={"max_queue_size": 2}).start()

    async def go():
        client = aioclient.InferenceServerClient(srv.http_url, conn_limit=20)
        try:
            async def one():
                i = aioclient.InferInput("input", [1, 4], "FP32")
                i.set_data_from_numpy(np.ones((1, 4), np.float32))
                try:
                    await client.infer("m", [i])
                    return "ok"
                except InferenceServerException as e:
                    return (e.status(), e.message())

            return await asyncio.gather(*(one() for _ in range(12)))
        finally:
            await client.close()

    try:
        results = asyncio.run(go())
        refused = [r for r in results if r != "ok"]
        assert refused and results.count("ok") >= 2
        assert all(r[0] == "503" and "exceeds maximum queue size of 2" in r[1] for r in refused)
    finally:
        srv.stop()


def test_gzip_request_body_index_filter_and_load_of_a_ready_model(server, client):
    import gzip

    body = json.dumps({"inputs": [{"name": "input", "datatype": "FP32", "shape": [1, 4], "data": [1, 2, 3, 4]}]}).encode()
    status, out = _raw(server, "POST", "/v2/models/classifier/versions/1/infer", gzip.compress(body), {"Content-Encoding": "gzip"})
    assert status == 200
    logits = json.loads(out)["outputs"][0]["data"]
    np.testing.assert_allclose(logits, expected_logits(np.array([[1, 2, 3, 4]], np.float32))[0], rtol=1e-5)
    status, out = _raw(server, "POST", "/v2/repository/index", b'{"ready": true}')
    assert status == 200 and {m["name"] for m in json.loads(out)} == {"classifier", "ints", "strings"}
    client.load_model("classifier")  # already loaded: accepted as a no-op, as Triton does


def test_over_loopback_a_lone_request_skips_the_queue_delay_and_the_thread_choice_is_served(tmp_path):
    classifier_onnx(tmp_path / "m" / "1" / "model.onnx")
    # a 2 s queue delay and preferred batches: a request that waited for company would take 2 s
    config = classifier_config("m", delay_us=2_000_000, preferred=(4, 8)).replace(
        'parameters { key: "intra_op_thread_count" value: { string_value: "1" } }\n', "")
    (tmp_path / "m" / "config.pbtxt").write_text(config)
    srv = ThreadServer(tmp_path, core_options={"intra_op_threads": 2}).start()
    try:
        client = httpclient.InferenceServerClient(srv.http_url)
        took = []
        for i in range(5):  # one user: each request alone
            x = np.full((1, 4), float(i), np.float32)
            t0 = time.perf_counter()
            result = client.infer("m", [_input(x)])
            took.append(time.perf_counter() - t0)
            np.testing.assert_allclose(result.as_numpy("logits"), expected_logits(x), rtol=1e-5)
        assert max(took) < 1.0
        stats = client.get_inference_statistics("m")["model_stats"][0]["inference_stats"]
        assert stats["queue"]["count"] == 5 and stats["queue"]["ns"] / 5 < 2_000_000  # < 2 ms, not the 2 s delay
        params = client.get_model_config("m")["parameters"]
        assert params["intra_op_thread_count"]["string_value"] == "2"
        assert params["thread_choice"]["string_value"].startswith(("batches up to", "every batch on 2 thread(s)"))
        client.close()
    finally:
        srv.stop()
