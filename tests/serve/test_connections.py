"""Connections held by clients that stall, or too many of them, against `trainserve serve` as a real process:
the request deadline (--body-timeout-s) closes slow bodies and gives their memory back, and --max-connections
refuses the connection beyond the cap while the others keep working."""

from __future__ import annotations

import socket
import threading
import time

import numpy as np
import psutil
import pytest
import tritonclient.http as httpclient

from tests.conftest import stop_process
from tests.serve.test_http_fast import _Conn, _expect_logits, _infer_request
from tests.serve.test_server import _start, _wait_ready
from tests.serve.tiny_models import expected_logits, make_repository

MiB = 1 << 20


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    return make_repository(tmp_path_factory.mktemp("connections") / "repo")


def _serve(repo, *args: str):
    proc = _start("--model-repository", str(repo), "--http-port", "0", "--grpc-port", "-1", "--metrics-port", "-1",
                  *args)
    try:
        port = _wait_ready(proc)
    except BaseException:
        stop_process(proc)
        raise
    return proc, port


def _infer_ok(port: int) -> None:
    client = httpclient.InferenceServerClient(f"127.0.0.1:{port}")
    try:
        x = np.random.rand(2, 4).astype(np.float32)
        i = httpclient.InferInput("input", [2, 4], "FP32")
        i.set_data_from_numpy(x)
        result = client.infer("classifier", [i])
        np.testing.assert_allclose(result.as_numpy("logits"), expected_logits(x), rtol=1e-5)
    finally:
        client.close()


def _read_until_closed(sock: socket.socket) -> bytes:
    answer = b""
    try:
        while chunk := sock.recv(65536):
            answer += chunk
    except ConnectionResetError:
        pass
    return answer


@pytest.mark.slow
def test_slow_bodies_are_closed_by_the_deadline_and_their_memory_returns(repo):
    n, declared = 10, 16 * MiB
    # 2 s: long enough for 10 bodies to be sent on a busy 2-core machine before the first deadline
    proc, port = _serve(repo, "--body-timeout-s", "2")
    try:
        server = psutil.Process(proc.pid)
        _infer_ok(port)  # warm: the idle level is that of a server that has answered
        time.sleep(1.5)
        idle = server.memory_info().rss
        answers: list[bytes] = [b""] * n
        held = threading.Barrier(n + 1)

        def slow(k: int) -> None:
            with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
                head = (f"POST /v2/models/classifier/infer HTTP/1.1\r\nHost: t\r\nContent-Length: {declared}\r\n"
                        f"Inference-Header-Content-Length: 100\r\n\r\n").encode()
                s.sendall(head + b"\x01" * (declared - 1))  # all but the last byte, then silence
                held.wait(30)
                answers[k] = _read_until_closed(s)

        threads = [threading.Thread(target=slow, args=(k,)) for k in range(n)]
        for t in threads:
            t.start()
        held.wait(30)
        peak = server.memory_info().rss
        _infer_ok(port)  # others are served while the slow bodies are held
        for t in threads:
            t.join(30)
        assert not any(t.is_alive() for t in threads), "a slow-body connection was not closed"
        for answer in answers:
            assert answer.startswith(b"HTTP/1.1 408") and b"did not arrive within 2 s" in answer, answer[:200]
            assert b"Connection: close" in answer
        time.sleep(1.5)  # the sweeper's heap trim
        after = server.memory_info().rss
        # held: up to 10 x 16 MiB; kept after the close it would stay ~160 MiB above the idle level
        assert after - idle < 48 * MiB, (
            f"RSS idle {idle / MiB:.0f} MiB, peak {peak / MiB:.0f} MiB, after {after / MiB:.0f} MiB")
        _infer_ok(port)
    finally:
        stop_process(proc)


def test_a_head_that_never_finishes_is_408_and_an_idle_new_connection_is_closed_silently(repo):
    proc, port = _serve(repo, "--body-timeout-s", "1")
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
            s.sendall(b"POST /v2/models/classifier/infer HTTP/1.1\r\nHost: t\r\n")  # no blank line: the head stalls
            answer = _read_until_closed(s)
        assert answer.startswith(b"HTTP/1.1 408"), answer[:200]
        with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
            assert _read_until_closed(s) == b""  # sent nothing: closed without an answer
        _infer_ok(port)
    finally:
        stop_process(proc)


def test_the_connection_beyond_the_cap_is_refused_and_new_ones_are_accepted_after_closing(repo):
    cap = 4
    proc, port = _serve(repo, "--max-connections", str(cap))
    try:
        conns = [_Conn(port) for _ in range(cap)]
        x = np.random.rand(1, 4).astype(np.float32)
        for c in conns:  # every one of them is being served (and so counted)
            c.sock.sendall(_infer_request(x))
            _expect_logits(c, x)
        with socket.create_connection(("127.0.0.1", port), timeout=30) as extra:
            answer = _read_until_closed(extra)
        assert answer.startswith(b"HTTP/1.1 503") and b"limit of 4 connections (--max-connections)" in answer, answer
        # one handed over to aiohttp still counts
        conns[0].sock.sendall(b"GET /v2/health/ready HTTP/1.1\r\nHost: t\r\n\r\n")
        assert conns[0].answer()[0] == 200
        with socket.create_connection(("127.0.0.1", port), timeout=30) as extra:
            assert _read_until_closed(extra).startswith(b"HTTP/1.1 503")
        for c in conns:  # the held ones keep working
            c.sock.sendall(_infer_request(x))
            _expect_logits(c, x)
        for c in conns:
            c.close()
        deadline = time.monotonic() + 10
        while True:  # the server sees the closes a moment later
            c = _Conn(port)
            c.sock.sendall(_infer_request(x))
            try:
                _expect_logits(c, x)
                break
            except (AssertionError, ConnectionError):
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
            finally:
                c.close()
        for _ in range(cap):
            _infer_ok(port)
    finally:
        stop_process(proc)
