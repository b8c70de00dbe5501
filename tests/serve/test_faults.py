"""A careless or hostile client against `trainserve serve` as a real process: slow large bodies must
not stall another client, and memory must come back after refused gzip bodies, refused gRPC requests and a
gRPC flood."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
import zlib

import numpy as np
import psutil
import pytest
import requests
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as aioclient
import tritonclient.http as httpclient

from tritonclient.utils import InferenceServerException

from tests.conftest import stop_process
from tests.serve.test_server import READY, _start
from tests.serve.tiny_models import make_repository

MiB = 1 << 20


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    return make_repository(tmp_path_factory.mktemp("faults") / "repo", classifier_delay_us=0)


def _serve(repo, *args: str) -> tuple:
    """(process, http port, grpc port) of a server with HTTP and gRPC on ephemeral ports."""
    proc = _start("--model-repository", str(repo), "--http-port", "0", "--grpc-port", "0", "--metrics-port", "-1",
                  *args)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                raise AssertionError(f"server exited before ready: {proc.wait(5)} {proc.stderr.read()}")
            if m := READY.search(line):
                threading.Thread(target=proc.stderr.read, daemon=True).start()  # a full pipe would stall it
                return proc, int(m.group(1)), int(m.group(2).rsplit(":", 1)[1])
        raise AssertionError("server not ready in time")
    except BaseException:
        stop_process(proc)
        raise


def test_slow_large_bodies_do_not_stall_another_client(repo):
    proc, port, _ = _serve(repo)
    try:
        status = open(f"/proc/{proc.pid}/status").read() if psutil.LINUX else ""
        if "THP_enabled" in status:  # the kernel zeroes a huge page inside the event loop's recv: off
            assert "THP_enabled:\t0" in status
        client = httpclient.InferenceServerClient(f"127.0.0.1:{port}", network_timeout=60)
        inp = httpclient.InferInput("input", [1, 4], "FP32")
        inp.set_data_from_numpy(np.ones((1, 4), np.float32))
        client.infer("classifier", [inp])
        lat: list[float] = []
        sending = threading.Event()
        declared, chunk = 32 * MiB, 256 * 1024
        answers: list[bytes] = []

        def slow() -> None:
            with socket.create_connection(("127.0.0.1", port), timeout=60) as s:
                s.sendall((f"POST /v2/models/classifier/infer HTTP/1.1\r\nHost: t\r\nContent-Length: {declared}\r\n"
                           "Inference-Header-Content-Length: 100\r\n\r\n").encode())
                sending.set()
                for _ in range(declared // chunk):  # ~2 s per body
                    s.sendall(b"\x01" * chunk)
                    time.sleep(0.015)
                answers.append(s.recv(100))

        senders = [threading.Thread(target=slow) for _ in range(6)]
        for t in senders:
            t.start()
        sending.wait(30)
        while any(t.is_alive() for t in senders):
            t0 = time.perf_counter()
            client.infer("classifier", [inp])
            lat.append(time.perf_counter() - t0)
        for t in senders:
            t.join(60)
        client.close()
        # the bodies are no valid request: each is answered (not stalled, not dropped)
        assert len(answers) == 6 and all(a.startswith(b"HTTP/1.1 400") for a in answers), answers
        p99 = float(np.percentile(lat, 99)) * 1000
        # measured 21 ms with 11 x 60 MiB (217 ms, max 1.4 s with huge pages; docs/BENCHMARKS.md); the bound
        # leaves room for a loaded 2-core machine
        assert len(lat) > 20 and p99 < 250, f"{len(lat)} requests, p99 {p99:.0f} ms"
    finally:
        stop_process(proc)


def _settles_near(proc: psutil.Process, idle: int, what: str, within: float = 0.10, timeout_s: float = 15) -> None:
    """RSS comes back within `within` of the idle level once the server is idle."""
    deadline = time.monotonic() + timeout_s
    while (rss := proc.memory_info().rss) > idle * (1 + within):
        if time.monotonic() > deadline:
            raise AssertionError(f"after {what}: RSS {rss / MiB:.0f} MiB, idle {idle / MiB:.0f} MiB")
        time.sleep(0.25)


def _gzip_bomb(inflated: int) -> bytes:
    comp = zlib.compressobj(1, zlib.DEFLATED, 31)  # gzip framing
    zeros = bytes(16 * MiB)
    return b"".join(comp.compress(zeros) for _ in range(inflated // len(zeros))) + comp.flush()


def _idle_rss(proc, port: int, grpc_port: int) -> tuple[psutil.Process, int]:
    """The server's RSS once it has answered one request on each path (gzip HTTP, gRPC) and trimmed."""
    server = psutil.Process(proc.pid)
    ok = zlib.compress(b'{"inputs":[{"name":"input","datatype":"FP32","shape":[1,4],"data":[1,2,3,4]}]}', wbits=31)
    r = requests.post(f"http://127.0.0.1:{port}/v2/models/classifier/infer", data=ok,
                      headers={"Content-Encoding": "gzip"}, timeout=60)
    assert r.status_code == 200, r.text
    client = grpcclient.InferenceServerClient(f"127.0.0.1:{grpc_port}")
    small = grpcclient.InferInput("input_ids", [4, 8], "INT64")
    small.set_data_from_numpy(np.ones((4, 8), np.int64))
    client.infer("ints", [small])
    client.close()
    time.sleep(2.5)  # the idle trim after those answers
    return server, server.memory_info().rss


# Each scenario on its own server, measured from its own idle level (the criterion: back within 10%).
# One after another on one server, what the earlier ones leave in glibc's and grpc's free lists adds up
# to 15-50% above idle (docs/BENCHMARKS.md).

@pytest.mark.slow
def test_memory_comes_back_after_refused_gzip_bodies(repo):
    proc, port, grpc_port = _serve(repo)
    try:
        server, idle = _idle_rss(proc, port, grpc_port)
        bomb = _gzip_bomb(512 * MiB)  # ~512 KiB that inflate far past the 64 MiB body limit
        for _ in range(2):
            r = requests.post(f"http://127.0.0.1:{port}/v2/models/classifier/infer", data=bomb,
                              headers={"Content-Encoding": "gzip"}, timeout=120)
            assert r.status_code == 413 and "request body, inflated from its gzip encoding, exceeds the server's " \
                "limit of 67108864 bytes (--max-body-bytes)" in r.json()["error"], r.text
        _settles_near(server, idle, "two refused gzip bodies")
    finally:
        stop_process(proc)


@pytest.mark.slow
def test_memory_comes_back_after_refused_grpc_requests(repo):
    proc, port, grpc_port = _serve(repo)
    try:
        server, idle = _idle_rss(proc, port, grpc_port)
        client = grpcclient.InferenceServerClient(f"127.0.0.1:{grpc_port}")
        wrong = grpcclient.InferInput("no_such_input", [1, 5 * MiB], "INT64")  # 40 MiB
        wrong.set_data_from_numpy(np.ones((1, 5 * MiB), np.int64))
        for _ in range(6):
            with pytest.raises(Exception, match="unexpected inference input 'no_such_input'"):
                client.infer("ints", [wrong])
        client.close()
        _settles_near(server, idle, "six refused 40 MiB gRPC requests")
    finally:
        stop_process(proc)


@pytest.mark.slow
def test_memory_comes_back_after_a_grpc_flood(repo):
    proc, port, grpc_port = _serve(repo)
    try:
        server, idle = _idle_rss(proc, port, grpc_port)

        async def flood() -> int:
            client = aioclient.InferenceServerClient(f"127.0.0.1:{grpc_port}")
            x = aioclient.InferInput("input_ids", [4, 16384], "INT64")  # 512 KiB
            x.set_data_from_numpy(np.ones((4, 16384), np.int64))
            answers = await asyncio.gather(*(client.infer("ints", [x]) for _ in range(400)), return_exceptions=True)
            await client.close()
            return sum(not isinstance(a, Exception) for a in answers)

        assert asyncio.run(flood()) > 0
        _settles_near(server, idle, "a flood of 400 gRPC requests of 512 KiB")
    finally:
        stop_process(proc)


def test_an_idle_stream_does_not_hold_shutdown(repo):
    proc, _, grpc_port = _serve(repo)
    try:
        answers: list = []
        idle = grpcclient.InferenceServerClient(f"127.0.0.1:{grpc_port}")
        idle.start_stream(callback=lambda result, error: answers.append((result, error)))
        x = grpcclient.InferInput("input", [1, 4], "FP32")
        x.set_data_from_numpy(np.ones((1, 4), np.float32))
        idle.async_stream_infer("classifier", [x])
        deadline = time.monotonic() + 30
        while not answers and time.monotonic() < deadline:
            time.sleep(0.05)
        assert answers and answers[0][1] is None, answers
        t0 = time.monotonic()
        proc.terminate()  # the stream stays open with nothing in flight
        proc.wait(30)
        took = time.monotonic() - t0
        # 30.2 s (the whole drain timeout) before; an idle stream now ends at once
        assert took < 2, f"shutdown with an idle stream took {took:.1f} s"
        assert proc.returncode == 0
        idle.stop_stream(cancel_requests=True)
        idle.close()
    finally:
        stop_process(proc)


def _frame(kind: int, flags: int, stream: int, payload: bytes) -> bytes:
    return len(payload).to_bytes(3, "big") + bytes([kind, flags]) + stream.to_bytes(4, "big") + payload


def _literal(name: bytes, value: bytes) -> bytes:
    """An HPACK header field without indexing, no Huffman coding (lengths below 127)."""
    return b"\x00" + bytes([len(name)]) + name + bytes([len(value)]) + value


def _stalled_grpc_call(port: int) -> socket.socket:
    """A raw HTTP/2 connection that starts a ModelInfer call declaring an 8 MiB message, sends 60 KB of it
    (inside the initial flow-control window) and stalls."""
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    headers = b"".join(_literal(n, v) for n, v in (
        (b":method", b"POST"), (b":scheme", b"http"), (b":path", b"/inference.GRPCInferenceService/ModelInfer"),
        (b":authority", b"t"), (b"content-type", b"application/grpc"), (b"te", b"trailers")))
    message = b"\x00" + (8 * MiB).to_bytes(4, "big") + b"\x01" * 60_000  # gRPC's length prefix, then part of it
    data = b"".join(_frame(0, 0, 1, message[i:i + 16384]) for i in range(0, len(message), 16384))  # DATA frames
    s.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + _frame(4, 0, 0, b"")  # preface, SETTINGS
              + _frame(1, 4, 1, headers) + data)  # HEADERS (END_HEADERS) on stream 1, then the partial message
    return s


def _ends_stream_1(s: socket.socket, timeout_s: float) -> bool:
    """True when the server ends stream 1 (trailers with END_STREAM, or RST_STREAM) within timeout_s."""
    s.settimeout(timeout_s)
    buf = b""
    try:
        while True:
            while len(buf) >= 9 and len(buf) >= 9 + int.from_bytes(buf[:3], "big"):
                length, kind, flags, stream = int.from_bytes(buf[:3], "big"), buf[3], buf[4], \
                    int.from_bytes(buf[5:9], "big") & 0x7FFFFFFF
                buf = buf[9 + length:]
                if stream == 1 and (kind == 3 or (kind == 1 and flags & 1)):
                    return True
            chunk = s.recv(65536)
            if not chunk:
                return False
            buf += chunk
    except (TimeoutError, socket.timeout):
        return False


def _refused(metrics_port: int) -> dict[str, int]:
    text = requests.get(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10).text
    return {line.split("{", 1)[1].split("}")[0]: int(float(line.rsplit(" ", 1)[1]))
            for line in text.splitlines() if line.startswith("trainserve_refused_total{")}


def test_a_stalled_grpc_message_is_ended_by_the_deadline_and_the_cap_refuses_one_more(repo):
    from tests.conftest import free_port

    metrics_port = free_port()
    proc, _, grpc_port = _serve(repo, "--body-timeout-s", "1.5", "--max-connections", "1",
                                "--metrics-port", str(metrics_port))
    try:
        stalled = _stalled_grpc_call(grpc_port)
        time.sleep(0.3)  # the call has begun on the server
        other = grpcclient.InferenceServerClient(f"127.0.0.1:{grpc_port}")
        x = grpcclient.InferInput("input", [1, 4], "FP32")
        x.set_data_from_numpy(np.ones((1, 4), np.float32))
        with pytest.raises(Exception, match=r"UNAVAILABLE.*limit of 1 connections \(--max-connections\)"):
            other.infer("classifier", [x])
        assert _ends_stream_1(stalled, 10), "the stalled call was not ended by the deadline"
        stalled.close()
        # the cap has room again once the server has seen the stalled connection close (asynchronously to the
        # client's close: once in a full run here the next call still found it held)
        deadline, early = time.monotonic() + 5, 0
        while True:
            try:
                assert other.infer("classifier", [x]).as_numpy("logits").shape == (1, 3)
                break
            except InferenceServerException as e:
                if "limit of 1 connections" not in str(e) or time.monotonic() > deadline:
                    raise
                early += 1  # refused and counted as such: still a correct answer of the cap
                time.sleep(0.05)
        other.close()
        counts = _refused(metrics_port)
        assert counts['frontend="grpc",reason="body_timeout"'] == 1
        assert counts['frontend="grpc",reason="connections"'] == 1 + early
        assert counts['frontend="http",reason="connections"'] == 0
    finally:
        stop_process(proc)
