"""The gRPC front end's own HTTP/2 (serve/protocol/grpc_h2.py): what tritonclient does not show, through a raw HTTP/2
connection on a real server; compressed messages and the grpc.aio fallback through tritonclient."""

from __future__ import annotations

import socket
import struct
import time

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from hpack import Decoder, Encoder
from tritonclient.grpc import service_pb2 as pb

from trainserve.core.errors import UserError
from trainserve.serve.protocol.grpc_h2 import GRPC_ENV, H2GrpcServer, create_frontend
from trainserve.serve.protocol.grpc_server import GrpcConfig, GrpcServer
from trainserve.serve.engine.server import ServerOptions
from tests.serve.inprocess import running_server
from tests.serve.tiny_models import expected_logits, make_repository

INFER = "/inference.GRPCInferenceService/ModelInfer"
STREAM_INFER = "/inference.GRPCInferenceService/ModelStreamInfer"
DATA, HEADERS, RST_STREAM, SETTINGS, PING, GOAWAY, WINDOW_UPDATE, CONTINUATION = 0, 1, 3, 4, 6, 7, 8, 9


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    repo = make_repository(tmp_path_factory.mktemp("repo"), classifier_delay_us=2000)
    with running_server(repo) as (srv, ports):
        yield srv, ports["grpc"]


def frame(kind: int, flags: int, stream: int, payload: bytes = b"") -> bytes:
    return len(payload).to_bytes(3, "big") + bytes([kind, flags]) + stream.to_bytes(4, "big") + payload


def infer_message(rows: np.ndarray, request_id: str = "") -> bytes:
    """A ModelInfer request for 'classifier' as a gRPC message: the 5-byte prefix, then the protobuf."""
    request = pb.ModelInferRequest(model_name="classifier", id=request_id)
    request.inputs.add(name="input", datatype="FP32", shape=list(rows.shape))
    request.raw_input_contents.append(rows.tobytes())
    body = request.SerializeToString()
    return b"\x00" + len(body).to_bytes(4, "big") + body


class RawClient:
    """An HTTP/2 client written frame by frame: it sends what a test says and reads back every frame."""

    def __init__(self, port: int, settings: bytes = b"") -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.encoder, self.decoder = Encoder(), Decoder()
        self.buf = b""
        self.sock.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + frame(SETTINGS, 0, 0, settings))

    def headers_block(self, path: str, extra: tuple = ()) -> bytes:
        return self.encoder.encode([(":method", "POST"), (":scheme", "http"), (":path", path),
                                    (":authority", "t"), ("content-type", "application/grpc"), ("te", "trailers"),
                                    *extra])

    def call(self, stream: int, path: str, message: bytes, extra: tuple = ()) -> None:
        self.sock.sendall(frame(HEADERS, 0x4, stream, self.headers_block(path, extra)) + frame(DATA, 0x1, stream, message))

    def frames(self, until, timeout_s: float = 10) -> list[tuple[int, int, int, bytes]]:
        """Frames read until `until(frames)` is true (or the server closes, or timeout_s passes)."""
        out: list[tuple[int, int, int, bytes]] = []
        deadline = time.monotonic() + timeout_s
        while not until(out) and time.monotonic() < deadline:
            if self._parse(out, until):
                return out
            self.sock.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                chunk = self.sock.recv(65536)
            except (TimeoutError, socket.timeout):
                break
            if not chunk:
                break
            self.buf += chunk
        return out

    def _parse(self, out: list, until) -> bool:
        """Move the whole frames of the buffer to `out`, stopping once `until(out)`; whether it did."""
        while len(self.buf) >= 9 and len(self.buf) >= 9 + int.from_bytes(self.buf[:3], "big"):
            n = int.from_bytes(self.buf[:3], "big")
            out.append((self.buf[3], self.buf[4], int.from_bytes(self.buf[5:9], "big") & 0x7FFFFFFF, self.buf[9:9 + n]))
            self.buf = self.buf[9 + n:]
            if until(out):
                return True
        return False

    def arrived(self) -> list[tuple[int, int, int, bytes]]:
        """The frames that have arrived by now, without waiting for more."""
        self.sock.setblocking(False)
        try:
            while chunk := self.sock.recv(1 << 20):
                self.buf += chunk
        except BlockingIOError:
            pass
        finally:
            self.sock.settimeout(10)
        out: list[tuple[int, int, int, bytes]] = []
        self._parse(out, lambda fs: False)
        return out

    def status(self, frames: list, stream: int) -> dict[str, str]:
        """The stream's trailers (or trailers-only headers) decoded, in order of arrival."""
        fields: dict[str, str] = {}
        for kind, _, sid, payload in frames:
            if kind == HEADERS and sid == stream:
                fields.update({k.decode() if isinstance(k, bytes) else k: v.decode() if isinstance(v, bytes) else v
                               for k, v in self.decoder.decode(payload)})
        return fields

    def close(self) -> None:
        self.sock.close()


def ended(stream: int):
    return lambda frames: any(k == HEADERS and f & 0x1 and s == stream for k, f, s, _ in frames)


def test_settings_and_ping_are_answered_and_an_unknown_method_is_unimplemented(server):
    client = RawClient(server[1])
    try:
        client.sock.sendall(frame(PING, 0, 0, b"12345678"))
        client.call(1, "/inference.GRPCInferenceService/NoSuchMethod", b"\x00\x00\x00\x00\x00")
        frames = client.frames(ended(1))
        assert any(k == SETTINGS and f & 0x1 for k, f, _, _ in frames), "our SETTINGS were not acknowledged"
        settings = next(p for k, f, _, p in frames if k == SETTINGS and not f & 0x1)
        assert dict(struct.iter_unpack(">HL", settings))[0x3] == 1024, "no limit of concurrent streams advertised"
        assert (PING, 0x1, 0, b"12345678") in frames, "the PING was not answered with its payload"
        fields = client.status(frames, 1)
        assert fields["grpc-status"] == "12" and "NoSuchMethod" in fields["grpc-message"]
    finally:
        client.close()


def test_calls_past_the_advertised_stream_limit_are_refused_and_the_rest_answered(server):
    from trainserve.serve.protocol.h2_connection import MAX_STREAMS

    client = RawClient(server[1])
    try:
        block = client.headers_block(INFER)  # the same fields each time: indexed after the first
        opened = b"".join(frame(HEADERS, 0x4, 1 + 2 * i, client.headers_block(INFER) if i else block)
                          for i in range(MAX_STREAMS + 1))  # each waits for its message
        refused = server[0].core.refusals.get("grpc", "streams")
        client.sock.sendall(opened)
        last = 1 + 2 * MAX_STREAMS
        frames = client.frames(lambda fs: any(k == RST_STREAM and s == last for k, _, s, _ in fs))
        assert (RST_STREAM, 0, last, (7).to_bytes(4, "big")) in frames, "one stream past the limit was not refused"
        assert not any(k in (HEADERS, RST_STREAM) and s < last for k, _, s, _ in frames)
        assert server[0].core.refusals.get("grpc", "streams") == refused + 1, "the refused call was not counted"
        client.sock.sendall(frame(DATA, 0x1, 1, infer_message(np.ones((1, 4), np.float32), "first")))
        assert client.status(client.frames(ended(1)), 1)["grpc-status"] == "0"
    finally:
        client.close()


def test_a_reply_larger_than_the_clients_window_waits_for_its_window_updates(server):
    client = RawClient(server[1], settings=struct.pack(">HL", 0x4, 10))  # a 10-byte window per stream
    try:
        x = np.random.default_rng(0).standard_normal((2, 4)).astype(np.float32)
        client.call(1, INFER, infer_message(x, "small-window"))
        first = client.frames(lambda fs: any(k == DATA for k, _, _, _ in fs), timeout_s=5)
        time.sleep(0.2)
        first += client.frames(lambda fs: False, timeout_s=0.2)  # nothing more may come without a window update
        sent = [p for k, _, s, p in first if k == DATA and s == 1]
        assert sum(map(len, sent)) == 10, f"{sum(map(len, sent))} bytes sent into a 10-byte window"
        assert not any(k == HEADERS and f & 0x1 for k, f, _, _ in first), "the call ended before its reply was sent"
        client.sock.sendall(frame(WINDOW_UPDATE, 0, 1, (1 << 20).to_bytes(4, "big")))
        rest = client.frames(ended(1))
        body = b"".join(sent + [p for k, _, s, p in rest if k == DATA and s == 1])
        assert client.status(first + rest, 1)["grpc-status"] == "0"
        reply = pb.ModelInferResponse.FromString(body[5:])
        assert len(body) == 5 + int.from_bytes(body[1:5], "big") and reply.id == "small-window"
        logits = np.frombuffer(reply.raw_output_contents[0], np.float32).reshape(2, -1)
        np.testing.assert_allclose(logits, expected_logits(x), rtol=1e-5)
    finally:
        client.close()


def test_a_header_block_in_continuation_frames_and_a_message_over_several_data_frames(server):
    client = RawClient(server[1])
    try:
        x = np.ones((3, 4), np.float32)
        block, message = client.headers_block(INFER), infer_message(x, "pieces")
        client.sock.sendall(frame(HEADERS, 0, 1, block[:5]) + frame(CONTINUATION, 0, 1, block[5:9])
                            + frame(CONTINUATION, 0x4, 1, block[9:])
                            + b"".join(frame(DATA, 0, 1, message[i:i + 7]) for i in range(0, len(message), 7))
                            + frame(DATA, 0x1, 1))  # the end of the call in an empty frame
        frames = client.frames(ended(1))
        assert client.status(frames, 1)["grpc-status"] == "0"
        body = b"".join(p for k, _, s, p in frames if k == DATA and s == 1)
        assert pb.ModelInferResponse.FromString(body[5:]).id == "pieces"
    finally:
        client.close()


def test_a_deadline_passed_while_the_message_arrived_is_deadline_exceeded_and_the_model_never_runs(server):
    port = server[1]
    stats = grpcclient.InferenceServerClient(f"127.0.0.1:{port}")
    client = RawClient(port)

    def successes() -> int:
        return sum(m.inference_stats.success.count for m in stats.get_inference_statistics("classifier").model_stats)

    try:
        before = successes()
        client.sock.sendall(frame(HEADERS, 0x4, 1, client.headers_block(INFER, (("grpc-timeout", "100m"),))))
        time.sleep(0.3)  # the client's 100 ms pass before its message is sent
        client.sock.sendall(frame(DATA, 0x1, 1, infer_message(np.ones((1, 4), np.float32))))
        frames = client.frames(ended(1))
        fields = client.status(frames, 1)
        assert fields["grpc-status"] == "4" and fields["grpc-message"] == "Deadline Exceeded", fields
        assert successes() == before, "the model ran for a call whose deadline had passed"
        # and a deadline that leaves room: answered
        client.call(3, INFER, infer_message(np.ones((1, 4), np.float32)), (("grpc-timeout", "10S"),))
        assert client.status(client.frames(ended(3)), 3)["grpc-status"] == "0"
        assert successes() == before + 1
    finally:
        client.close()
        stats.close()


def test_a_connection_that_is_not_http2_is_closed_and_the_server_goes_on(server):
    s = socket.create_connection(("127.0.0.1", server[1]), timeout=10)
    s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    received = b""
    while chunk := s.recv(4096):  # the server's SETTINGS, then a GOAWAY, then the close
        received += chunk
    s.close()
    assert b"not an HTTP/2 connection preface" in received
    with grpcclient.InferenceServerClient(f"127.0.0.1:{server[1]}") as client:
        assert client.is_server_ready()


@pytest.mark.parametrize("algorithm", ["gzip", "deflate"])
def test_compressed_requests_are_inflated(server, algorithm):
    x = np.random.default_rng(1).standard_normal((5, 4)).astype(np.float32)
    with grpcclient.InferenceServerClient(f"127.0.0.1:{server[1]}") as client:
        inp = grpcclient.InferInput("input", [5, 4], "FP32").set_data_from_numpy(x)
        result = client.infer("classifier", [inp], compression_algorithm=algorithm)
    np.testing.assert_allclose(result.as_numpy("logits"), expected_logits(x), rtol=1e-5)


def test_a_compressed_message_past_the_limit_is_resource_exhausted(tmp_path):
    import gzip

    repo = make_repository(tmp_path / "repo")
    with running_server(repo, max_body_bytes=4096) as (_, ports):
        client = RawClient(ports["grpc"])
        try:
            x = np.zeros((1, 4), np.float32)
            request = pb.ModelInferRequest(model_name="classifier")
            request.inputs.add(name="input", datatype="FP32", shape=[1, 4])
            request.raw_input_contents.append(x.tobytes() + b"\x00" * 100_000)  # inflates past 4 KiB
            packed = gzip.compress(request.SerializeToString())
            assert len(packed) < 4096
            client.call(1, INFER, b"\x01" + len(packed).to_bytes(4, "big") + packed, (("grpc-encoding", "gzip"),))
            fields = client.status(client.frames(ended(1)), 1)
            assert fields["grpc-status"] == "8" and "larger than max" in fields["grpc-message"], fields
            client.call(3, INFER, b"\x01\x00\x00\x00\x03abc", (("grpc-encoding", "snappy"),))
            fields = client.status(client.frames(ended(3)), 3)
            assert fields["grpc-status"] == "12" and "gzip and deflate" in fields["grpc-message"], fields
        finally:
            client.close()


def test_grpc_is_served_on_its_own_http2_unless_aio_is_asked(monkeypatch, tmp_path):
    options = ServerOptions(grpc_port=0)
    monkeypatch.delenv(GRPC_ENV, raising=False)
    assert isinstance(create_frontend(None, "127.0.0.1", 0, options), H2GrpcServer)
    monkeypatch.setenv(GRPC_ENV, "aio")
    assert isinstance(create_frontend(None, "127.0.0.1", 0, options), GrpcServer)
    monkeypatch.setenv(GRPC_ENV, "fast")
    with pytest.raises(UserError, match="TRAINSERVE_SERVE_GRPC='fast' must be 'h2'"):
        create_frontend(None, "127.0.0.1", 0, options)
    # the grpc.aio fallback still serves
    monkeypatch.setenv(GRPC_ENV, "aio")
    repo = make_repository(tmp_path / "repo")
    with running_server(repo) as (srv, ports):
        assert isinstance(next(f for f in srv.frontends if f.name == "grpc"), GrpcServer)
        x = np.ones((2, 4), np.float32)
        with grpcclient.InferenceServerClient(f"127.0.0.1:{ports['grpc']}") as client:
            result = client.infer("classifier", [grpcclient.InferInput("input", [2, 4], "FP32").set_data_from_numpy(x)])
        np.testing.assert_allclose(result.as_numpy("logits"), expected_logits(x), rtol=1e-5)


def test_a_taken_port_is_an_os_error_naming_the_address(server):
    import asyncio

    async def scenario() -> None:
        with pytest.raises(OSError, match=f"cannot listen for gRPC on 127.0.0.1:{server[1]}"):
            await H2GrpcServer(core=None, config=GrpcConfig(port=server[1])).start()

    asyncio.run(scenario())


def test_calls_cancelled_faster_than_allowed_end_the_connection_and_the_server_goes_on(server):
    from trainserve.serve.protocol.h2_connection import RESET_BURST

    srv, port = server
    before = srv.core.refusals.get("grpc", "flood")
    client = RawClient(port)
    try:
        burst = b"".join(frame(HEADERS, 0x4, 1 + 2 * i, client.headers_block(INFER))
                         + frame(RST_STREAM, 0, 1 + 2 * i, (8).to_bytes(4, "big"))  # CANCEL, before its message
                         for i in range(RESET_BURST + 50))
        client.sock.sendall(burst)
        frames = client.frames(lambda fs: any(k == GOAWAY for k, _, _, _ in fs))
        goaway = next((p for k, _, _, p in frames if k == GOAWAY), None)
        assert goaway is not None, "a rapid-reset flood was not ended"
        assert int.from_bytes(goaway[4:8], "big") == 0xB and b"cancelled" in goaway[8:]  # ENHANCE_YOUR_CALM
    finally:
        client.close()
    assert srv.core.refusals.get("grpc", "flood") == before + 1
    # a client cancelling within the bound is served, and so is everyone else
    polite = RawClient(port)
    try:
        polite.sock.sendall(b"".join(frame(HEADERS, 0x4, 1 + 2 * i, polite.headers_block(INFER))
                                     + frame(RST_STREAM, 0, 1 + 2 * i, (8).to_bytes(4, "big"))
                                     for i in range(RESET_BURST // 2)))
        polite.call(RESET_BURST + 1, INFER, infer_message(np.ones((1, 4), np.float32), "after"))
        frames = polite.frames(ended(RESET_BURST + 1))
        assert polite.status(frames, RESET_BURST + 1)["grpc-status"] == "0"
        assert not any(k == GOAWAY for k, _, _, _ in frames)
    finally:
        polite.close()


def test_pings_whose_answers_are_never_read_end_the_connection_and_the_server_goes_on(server):
    srv, port = server
    before = srv.core.refusals.get("grpc", "flood")
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # little room on this side for the answers
    sock.settimeout(10)
    sock.connect(("127.0.0.1", port))
    pings = frame(PING, 0, 0, b"01234567") * 20_000  # 340 KB of PINGs per send, their answers never read
    ended_by_server = False
    try:
        sock.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + frame(SETTINGS, 0, 0))
        for _ in range(400):  # at most ~136 MB, far past any socket buffers
            sock.sendall(pings)
    except (ConnectionResetError, BrokenPipeError):  # the server's abort; a timeout here would be a failure
        ended_by_server = True
    finally:
        sock.close()
    assert ended_by_server, "a client that never read its PINGs' answers was kept"
    deadline = time.monotonic() + 5
    while srv.core.refusals.get("grpc", "flood") == before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert srv.core.refusals.get("grpc", "flood") == before + 1
    client = grpcclient.InferenceServerClient(f"127.0.0.1:{port}")
    try:
        x = grpcclient.InferInput("input", [1, 4], "FP32")
        x.set_data_from_numpy(np.ones((1, 4), np.float32))
        assert client.infer("classifier", [x]).as_numpy("logits").shape == (1, 3)
    finally:
        client.close()


def test_a_unary_call_with_more_than_one_message_is_answered_at_once(server):
    client = RawClient(server[1])
    try:
        message = infer_message(np.ones((1, 4), np.float32))
        client.sock.sendall(frame(HEADERS, 0x4, 1, client.headers_block(INFER)) + frame(DATA, 0, 1, message)
                            + frame(DATA, 0, 1, message * 2))  # three messages, and no END_STREAM
        frames = client.frames(ended(1), timeout_s=5)  # the body deadline (30 s) would answer it only later
        fields = client.status(frames, 1)
        assert fields.get("grpc-status") == "12", f"not answered before the call's END_STREAM: {fields}"
        assert fields["grpc-message"] == "the ModelInfer call carried 3 messages; it takes one"
        assert (RST_STREAM, 0, 1, bytes(4)) in client.frames(lambda fs: any(k == RST_STREAM for k, _, _, _ in fs),
                                                            timeout_s=5) + frames, "the rest of the call not stopped"
    finally:
        client.close()


def stream_replies(data: bytes) -> list[pb.ModelStreamInferResponse]:
    out, pos = [], 0
    while pos + 5 <= len(data):
        n = int.from_bytes(data[pos + 1:pos + 5], "big")
        out.append(pb.ModelStreamInferResponse.FromString(data[pos + 5:pos + 5 + n]))
        pos += 5 + n
    return out


def send_until_blocked(client: RawClient, sid: int, message: bytes, window: dict[int, int],
                       replies: dict[int, bytes]) -> int:
    """Send `message` on stream `sid` while the client's windows allow (`window`: by stream id, 0 the
    connection's, grown by the server's WINDOW_UPDATEs), until a second passes without credit or 4 windows went
    through; how many were sent. DATA received meanwhile is added to `replies`."""
    from trainserve.serve.protocol.h2_flow import RECV_WINDOW

    sent, progress = 0, time.monotonic()
    while sent < 4 * RECV_WINDOW // len(message):  # a server crediting on arrival lets all of it through
        if min(window[0], window[sid]) >= len(message):
            client.sock.sendall(frame(DATA, 0, sid, message))
            window[0], window[sid], sent = window[0] - len(message), window[sid] - len(message), sent + 1
            progress = time.monotonic()
        elif time.monotonic() - progress > 1.0:
            break
        else:
            time.sleep(0.05)
        for kind, _, s, payload in client.arrived():
            if kind == WINDOW_UPDATE and s in window:
                window[s] += int.from_bytes(payload, "big")
                progress = time.monotonic()
            elif kind == DATA:
                replies[s] += payload
    return sent


def test_a_stream_whose_replies_are_not_read_stops_being_credited_and_resumes_when_they_are(tmp_path):
    from trainserve.serve.protocol.h2_flow import OUT_BACKLOG, RECV_WINDOW

    repo = make_repository(tmp_path / "repo")
    with running_server(repo, max_queue_size=8) as (srv, ports):  # few requests in flight: replies come back soon
        h2 = next(f for f in srv.frontends if f.name == "grpc")
        client = RawClient(ports["grpc"])  # its windows for the replies: HTTP/2's 65,535 bytes, not raised
        try:
            message = infer_message(np.ones((1, 4), np.float32), "x" * 60_000)  # each reply echoes the id
            # the streams' windows from the server's SETTINGS; the connection's HTTP/2's first, grown by the
            # server's WINDOW_UPDATEs (the first of them among the frames read back)
            window = {0: 65_535, 1: RECV_WINDOW, 3: RECV_WINDOW}
            replies = {1: b"", 3: b""}
            client.sock.sendall(frame(HEADERS, 0x4, 1, client.headers_block(STREAM_INFER)))
            sent = {1: send_until_blocked(client, 1, message, window, replies)}
            assert sent[1] * len(message) < 2 * RECV_WINDOW, f"{sent[1] * len(message)} bytes let in on one stream"
            assert window[1] < len(message), "stopped by something else than the stream's window"
            conn = next(iter(h2.connections))
            stream = conn.streams[1]
            assert stream.unsent > OUT_BACKLOG, "the servicer stopped taking requests with its replies drained"
            assert RECV_WINDOW // 2 < conn.queued == stream.queued <= RECV_WINDOW * 3 // 2 + len(message)
            assert not client.frames(lambda fs: any(k == WINDOW_UPDATE for k, _, _, _ in fs), timeout_s=0.5)
            # a second stream has its own window, but the connection's is not credited while stream 1's requests wait
            connection_window = window[0]
            client.sock.sendall(frame(HEADERS, 0x4, 3, client.headers_block(STREAM_INFER)))
            sent[3] = send_until_blocked(client, 3, message, window, replies)
            assert sent[3] * len(message) <= connection_window and window[3] >= len(message), \
                "the connection was credited while more than half a window of requests waited on it"
            # the client reads: its windows open, the servicers take requests again and both windows are credited
            client.sock.sendall(b"".join(frame(WINDOW_UPDATE, 0, s, (1 << 30).to_bytes(4, "big")) for s in (0, 1, 3)))
            frames = client.frames(lambda fs: {0, 1} <= {s for k, _, s, _ in fs if k == WINDOW_UPDATE})
            assert {0, 1} <= {s for k, _, s, _ in frames if k == WINDOW_UPDATE}, "not credited again"
            client.sock.sendall(frame(DATA, 0x1, 1) + frame(DATA, 0x1, 3))  # END_STREAM: the client has sent all
            frames += client.frames(lambda fs: ended(1)(fs) and ended(3)(fs), timeout_s=30)
            for s in (1, 3):
                assert client.status(frames, s)["grpc-status"] == "0"
                answers = stream_replies(replies[s] + b"".join(p for k, _, i, p in frames if k == DATA and i == s))
                assert len(answers) == sent[s] and all(a.infer_response.id == "x" * 60_000 for a in answers)
            assert conn.queued == 0 and conn.partial == 0
        finally:
            client.close()


def test_a_connection_past_its_budget_of_messages_still_arriving_has_that_call_refused(tmp_path, monkeypatch):
    from trainserve.serve.protocol import grpc_h2

    monkeypatch.setattr(grpc_h2, "PARTIAL_FLOOR", 0)  # the budget: 4 messages at the limit, 1 MiB
    repo = make_repository(tmp_path / "repo")
    with running_server(repo, max_body_bytes=1 << 18) as (srv, ports):
        h2 = next(f for f in srv.frontends if f.name == "grpc")
        client = RawClient(ports["grpc"], settings=struct.pack(">HL", 0x4, 1 << 20))  # room for a reply
        message = infer_message(np.ones((1, 4), np.float32), "x" * 200_010)
        head = 200_000  # of each message: 5 are within the budget, a 6th is not
        try:
            opened = b"".join(frame(HEADERS, 0x4, s, client.headers_block(INFER)) + frame(DATA, 0, s, message[:head])
                              for s in (1, 3, 5, 7, 9, 11))
            client.sock.sendall(frame(WINDOW_UPDATE, 0, 0, (1 << 20).to_bytes(4, "big")) + opened)
            frames = client.frames(ended(11), timeout_s=5)
            fields = client.status(frames, 11)
            assert fields.get("grpc-status") == "8", fields  # RESOURCE_EXHAUSTED
            assert fields["grpc-message"] == ("this connection holds more than 1 MiB of request messages still "
                                              "arriving; send fewer large requests at once on one connection")
            assert not any(k == HEADERS and s != 11 for k, _, s, _ in frames), "another call was answered"
            assert srv.core.refusals.get("grpc", "memory") == 1
            conn = next(iter(h2.connections))
            assert conn.partial == 5 * head
            client.sock.sendall(frame(RST_STREAM, 0, 3, (8).to_bytes(4, "big")))  # cancelled: its bytes let go
            client.sock.sendall(frame(DATA, 0x1, 1, message[head:]))  # the others go on
            frames = client.frames(ended(1))
            assert client.status(frames, 1)["grpc-status"] == "0"
            body = b"".join(p for k, _, s, p in frames if k == DATA and s == 1)
            assert pb.ModelInferResponse.FromString(body[5:]).id == "x" * 200_010
            assert conn.partial == 3 * head
        finally:
            client.close()
        with grpcclient.InferenceServerClient(f"127.0.0.1:{ports['grpc']}") as other:
            x = grpcclient.InferInput("input", [1, 4], "FP32").set_data_from_numpy(np.ones((1, 4), np.float32))
            assert other.infer("classifier", [x]).as_numpy("logits").shape == (1, 3)


def goaway_code(client: RawClient, timeout_s: float = 3) -> int | None:
    """The error code of the GOAWAY the server sends next (None if none came before it closed or timeout_s)."""
    try:
        frames = client.frames(lambda fs: any(k == GOAWAY for k, _, _, _ in fs), timeout_s=timeout_s)
    except ConnectionResetError:
        return None
    return next((int.from_bytes(p[4:8], "big") for k, _, _, p in frames if k == GOAWAY), None)


def test_data_past_the_granted_window_ends_the_connection_with_flow_control_error(server):
    from trainserve.serve.protocol.h2_flow import RECV_WINDOW

    mib = 1 << 20
    client = RawClient(server[1])
    try:
        # one complete 1 MiB message per call, without END_STREAM, blind to the windows: the server grants
        # RECV_WINDOW, credits half a window once while no more than that waits, then no more: 24 MiB in all
        message = b"\x00" + (mib - 5).to_bytes(4, "big") + bytes(mib - 5)
        granted = RECV_WINDOW + RECV_WINDOW // 2
        client.sock.sendall(b"".join(frame(HEADERS, 0x4, 1 + 2 * i, client.headers_block(INFER))
                                     + frame(DATA, 0, 1 + 2 * i, message) for i in range(granted // mib + 1)))
        assert goaway_code(client) == 0x3, "DATA past the window granted was accepted"  # FLOW_CONTROL_ERROR
    finally:
        client.close()
    with grpcclient.InferenceServerClient(f"127.0.0.1:{server[1]}") as other:
        assert other.is_server_ready()


def test_complete_messages_waiting_for_their_calls_end_count_against_the_connections_budget(tmp_path, monkeypatch):
    from trainserve.serve.protocol import grpc_h2

    monkeypatch.setattr(grpc_h2, "PARTIAL_FLOOR", 0)  # the budget: 4 messages at the limit, 1 MiB
    repo = make_repository(tmp_path / "repo")
    with running_server(repo, max_body_bytes=1 << 18) as (srv, ports):
        h2 = next(f for f in srv.frontends if f.name == "grpc")
        client = RawClient(ports["grpc"], settings=struct.pack(">HL", 0x4, 1 << 20))  # room for a reply
        message = infer_message(np.ones((1, 4), np.float32), "x" * 200_010)  # 5 fit in the budget, a 6th not
        try:
            client.sock.sendall(frame(WINDOW_UPDATE, 0, 0, (1 << 20).to_bytes(4, "big")) + b"".join(
                frame(HEADERS, 0x4, s, client.headers_block(INFER)) + frame(DATA, 0, s, message)
                for s in (1, 3, 5, 7, 9, 11)))  # whole messages, no END_STREAM
            frames = client.frames(ended(11), timeout_s=3)
            fields = client.status(frames, 11)
            assert fields.get("grpc-status") == "8", f"a sixth waiting message was held: {fields}"
            assert not any(k == HEADERS and s != 11 for k, _, s, _ in frames), "another call was answered"
            conn = next(iter(h2.connections))
            assert conn.partial + conn.queued <= h2.partial_budget
            client.sock.sendall(frame(DATA, 0x1, 1))  # the others go on
            frames = client.frames(ended(1))
            assert client.status(frames, 1)["grpc-status"] == "0"
            assert conn.queued == 4 * (len(message) - 5)
        finally:
            client.close()


def test_a_megabyte_of_table_size_updates_is_refused_at_once_while_another_client_is_served(server):
    import concurrent.futures
    import threading

    srv, port = server
    h2 = next(f for f in srv.frontends if f.name == "grpc")

    def loop_cpu_s() -> float:  # CPU time of the server's event-loop thread
        answer: concurrent.futures.Future = concurrent.futures.Future()
        h2.loop.call_soon_threadsafe(lambda: answer.set_result(time.thread_time()))
        return answer.result(timeout=10)

    before = srv.core.refusals.get("grpc", "flood")
    other = grpcclient.InferenceServerClient(f"127.0.0.1:{port}")
    client = RawClient(port)
    latency: list[float] = []

    def other_call() -> None:
        began = time.monotonic()
        assert other.is_server_ready()
        latency.append(time.monotonic() - began)

    try:
        assert other.is_server_ready()  # connected before
        client.frames(lambda fs: any(k == SETTINGS for k, _, _, _ in fs))
        cpu = loop_cpu_s()
        block = b"\x20" * (1 << 20)  # a dynamic-table size update to 0, over and over: a frame of the largest size
        try:
            client.sock.sendall(frame(HEADERS, 0x5, 1, block))
        except (ConnectionResetError, BrokenPipeError):
            pass  # ended while it was still sending
        caller = threading.Thread(target=other_call)
        caller.start()
        code = goaway_code(client)
        caller.join(timeout=10)
        cpu = loop_cpu_s() - cpu
        assert cpu < 0.010, f"{cpu * 1e3:.1f} ms of the event loop's CPU for one header block"
        assert latency and latency[0] < 0.5, f"another client's call waited {latency} s"
        assert code in (0xB, None), code  # ENHANCE_YOUR_CALM (None: the close overtook it)
        assert srv.core.refusals.get("grpc", "flood") == before + 1, "the block was not refused"
    finally:
        client.close()
        other.close()


def test_replies_parked_on_a_zero_window_free_the_connection_cap_and_are_reset_at_the_deadline(tmp_path):
    repo = make_repository(tmp_path / "repo")
    with running_server(repo, max_connections=2, body_timeout_s=0.4) as (srv, ports):
        h2 = next(f for f in srv.frontends if f.name == "grpc")
        stalled = [RawClient(ports["grpc"], settings=struct.pack(">HL", 0x4, 0)) for _ in range(2)]
        began = time.monotonic()
        try:
            for client in stalled:  # ServerReady, whose reply can never be sent into a window of 0
                client.sock.sendall(frame(HEADERS, 0x4, 1, client.headers_block(
                    "/inference.GRPCInferenceService/ServerReady")) + frame(DATA, 0x1, 1, bytes(5)))
                assert client.frames(lambda fs: any(k == HEADERS for k, _, _, _ in fs)), "no reply began"
            with grpcclient.InferenceServerClient(f"127.0.0.1:{ports['grpc']}") as fresh:
                assert fresh.is_server_ready(), "a new client was locked out by replies waiting for a window"
            for client in stalled:
                frames = client.frames(lambda fs: any(k == RST_STREAM for k, _, _, _ in fs), timeout_s=3)
                assert (RST_STREAM, 0, 1, (8).to_bytes(4, "big")) in frames, "a parked reply was never reset"
            assert time.monotonic() - began < 2.0
            # the reset is on the wire before the server's loop forgets the stream: give it that moment
            settled = time.monotonic() + 2.0
            while (h2.parked or h2.guard.peers) and time.monotonic() < settled:
                time.sleep(0.02)
            assert not h2.parked and h2.guard.peers == {}
        finally:
            for client in stalled:
                client.close()
