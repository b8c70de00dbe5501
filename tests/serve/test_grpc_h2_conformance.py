"""RFC 9113 / RFC 7541 rules of serve/protocol/h2_rules.py and serve/protocol/h2_connection.py, one case per
rule: a client breaks the rule frame by frame, the server answers with the RFC's error (GOAWAY for a connection
error, RST_STREAM for a stream error) and code, and a normal client (h2's) is served afterwards. Frames go out as
raw bytes (the broken ones are what a frame library refuses to build) and come back through hyperframe's
parser."""

from __future__ import annotations

import socket
import struct
import time
import urllib.request
from collections.abc import Callable

import h2.config
import h2.connection
import h2.events
import pytest
from hpack import Encoder
from hyperframe.frame import Frame, GoAwayFrame, RstStreamFrame
from tritonclient.grpc import service_pb2 as pb

from tests.serve.inprocess import running_server
from tests.serve.tiny_models import make_repository

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, PRIORITY, RST_STREAM, SETTINGS, PUSH_PROMISE, PING, GOAWAY, WINDOW_UPDATE, CONTINUATION = range(10)
END_STREAM, ACK, END_HEADERS, PADDED = 0x1, 0x1, 0x4, 0x8
PROTOCOL_ERROR, FLOW_CONTROL_ERROR, STREAM_CLOSED, FRAME_SIZE_ERROR, CANCEL, COMPRESSION_ERROR, ENHANCE_YOUR_CALM = \
    0x1, 0x3, 0x5, 0x6, 0x8, 0x9, 0xB
READY = "/inference.GRPCInferenceService/ServerReady"
REQUEST = ((":method", "POST"), (":scheme", "http"), (":path", READY), (":authority", "t"),
           ("content-type", "application/grpc"), ("te", "trailers"))


@pytest.fixture(scope="module")
def port(tmp_path_factory):
    with running_server(make_repository(tmp_path_factory.mktemp("repo"))) as (_, ports):
        yield ports["grpc"]


def frame(kind: int, flags: int, stream: int, payload: bytes = b"") -> bytes:
    return len(payload).to_bytes(3, "big") + bytes([kind, flags]) + stream.to_bytes(4, "big") + payload


class Client:
    """A connection that sends what a case says (after the preface and an empty SETTINGS, unless told) and reads
    the server's frames back through hyperframe."""

    def __init__(self, port: int, preface: bytes = PREFACE + frame(SETTINGS, 0, 0)) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        self.encoder = Encoder()
        self.buf = b""
        self.sock.sendall(preface)

    def block(self, fields=REQUEST) -> bytes:
        return self.encoder.encode(list(fields))

    def send(self, *frames: bytes) -> None:
        self.sock.sendall(b"".join(frames))

    def call(self, stream: int) -> None:
        """A whole ServerReady call on `stream`, waited for to its end."""
        self.send(frame(HEADERS, END_HEADERS, stream, self.block()), frame(DATA, END_STREAM, stream, bytes(5)))
        self.read(lambda f: f.type == HEADERS and "END_STREAM" in f.flags and f.stream_id == stream)

    def read(self, until: Callable[[Frame], bool], timeout_s: float = 3.0) -> Frame | None:
        """The first frame from the server for which `until` holds; None if the server closed or time ran out."""
        deadline = time.monotonic() + timeout_s
        while True:
            while len(self.buf) >= 9:
                parsed, length = Frame.parse_frame_header(memoryview(self.buf[:9]))
                if len(self.buf) < 9 + length:
                    break
                parsed.parse_body(memoryview(self.buf[9:9 + length]))
                self.buf = self.buf[9 + length:]
                if until(parsed):
                    return parsed
            self.sock.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                chunk = self.sock.recv(65536)
            except (TimeoutError, socket.timeout, ConnectionResetError):
                return None
            if not chunk:
                return None
            self.buf += chunk

    def error(self) -> tuple[str, int, int] | None:
        """The server's next error: ("GOAWAY", code, 0) or ("RST_STREAM", code, stream)."""
        found = self.read(lambda f: isinstance(f, (GoAwayFrame, RstStreamFrame)))
        if isinstance(found, GoAwayFrame):
            return "GOAWAY", found.error_code, 0
        if isinstance(found, RstStreamFrame):
            return "RST_STREAM", found.error_code, found.stream_id
        return None


def served(port: int) -> bool:
    """Whether a normal client (h2's) gets ServerReady answered OK and ready."""
    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, header_encoding="utf-8"))
    sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    try:
        conn.initiate_connection()
        conn.send_headers(1, list(REQUEST))
        conn.send_data(1, bytes(5), end_stream=True)
        sock.sendall(conn.data_to_send())
        body, trailers = b"", {}
        while not trailers:
            chunk = sock.recv(65536)
            if not chunk:
                return False
            for event in conn.receive_data(chunk):
                if isinstance(event, h2.events.DataReceived):
                    body += event.data
                    conn.acknowledge_received_data(event.flow_controlled_length, 1)
                elif isinstance(event, h2.events.TrailersReceived):
                    trailers = dict(event.headers)
            sock.sendall(conn.data_to_send())
        return trailers.get("grpc-status") == "0" and pb.ServerReadyResponse.FromString(body[5:]).ready
    finally:
        sock.close()


def open_stream(c: Client, stream: int = 1) -> None:
    """A ServerReady call whose message has not come yet: the stream stays open."""
    c.send(frame(HEADERS, END_HEADERS, stream, c.block()))


def fields_with(*changes: tuple[str, str], drop: str = "", first: tuple[str, str] | None = None) -> list:
    out = [(k, v) for k, v in REQUEST if k != drop] + list(changes)
    return ([first] if first else []) + out


def request_case(fields) -> Callable[[Client], None]:
    return lambda c: c.send(frame(HEADERS, END_HEADERS | END_STREAM, 1, c.block(fields)))


def with_length(declared: str, body: bytes, end_on_headers: bool = False) -> Callable[[Client], None]:
    """A ServerReady call whose content-length says `declared` and whose DATA carries `body`."""
    def case(c: Client) -> None:
        block = c.block(fields_with(("content-length", declared)))
        if end_on_headers:
            c.send(frame(HEADERS, END_HEADERS | END_STREAM, 1, block))
        else:
            c.send(frame(HEADERS, END_HEADERS, 1, block), frame(DATA, END_STREAM, 1, body))
    return case


def window_past_max_by_settings(c: Client) -> None:
    open_stream(c)
    c.send(frame(WINDOW_UPDATE, 0, 1, ((1 << 31) - 1 - 65_535).to_bytes(4, "big")),  # the stream's window at 2^31-1
           frame(SETTINGS, 0, 0, struct.pack(">HL", 0x4, 65_536)))  # and one more by the initial window


def after_a_call(*frames: Callable[[Client], bytes]) -> Callable[[Client], None]:
    def case(c: Client) -> None:
        c.call(5)
        c.send(*(f(c) for f in frames))
    return case


CASES: dict[str, tuple[Callable[[Client], None], tuple[str, int, int]]] = {
    # the preface
    "preface without SETTINGS": (lambda c: None, ("GOAWAY", PROTOCOL_ERROR, 0)),
    # frame sizes, and frames on the wrong stream
    "PING of 7 bytes": (lambda c: c.send(frame(PING, 0, 0, bytes(7))), ("GOAWAY", FRAME_SIZE_ERROR, 0)),
    "PING on a stream": (lambda c: c.send(frame(PING, 0, 1, bytes(8))), ("GOAWAY", PROTOCOL_ERROR, 0)),
    "SETTINGS on a stream": (lambda c: c.send(frame(SETTINGS, 0, 1)), ("GOAWAY", PROTOCOL_ERROR, 0)),
    "SETTINGS of 5 bytes": (lambda c: c.send(frame(SETTINGS, 0, 0, bytes(5))), ("GOAWAY", FRAME_SIZE_ERROR, 0)),
    "SETTINGS ACK with a payload": (lambda c: c.send(frame(SETTINGS, ACK, 0, bytes(6))),
                                    ("GOAWAY", FRAME_SIZE_ERROR, 0)),
    "RST_STREAM of 3 bytes": (lambda c: (open_stream(c), c.send(frame(RST_STREAM, 0, 1, bytes(3)))),
                              ("GOAWAY", FRAME_SIZE_ERROR, 0)),
    "RST_STREAM on stream 0": (lambda c: c.send(frame(RST_STREAM, 0, 0, bytes(4))), ("GOAWAY", PROTOCOL_ERROR, 0)),
    "GOAWAY on a stream": (lambda c: c.send(frame(GOAWAY, 0, 1, bytes(8))), ("GOAWAY", PROTOCOL_ERROR, 0)),
    "GOAWAY of 4 bytes": (lambda c: c.send(frame(GOAWAY, 0, 0, bytes(4))), ("GOAWAY", FRAME_SIZE_ERROR, 0)),
    "PRIORITY on stream 0": (lambda c: c.send(frame(PRIORITY, 0, 0, bytes(5))), ("GOAWAY", PROTOCOL_ERROR, 0)),
    "PRIORITY of 4 bytes": (lambda c: c.send(frame(PRIORITY, 0, 3, bytes(4))), ("RST_STREAM", FRAME_SIZE_ERROR, 3)),
    "PRIORITY on itself": (lambda c: c.send(frame(PRIORITY, 0, 3, (3).to_bytes(4, "big") + b"\x10")),
                           ("RST_STREAM", PROTOCOL_ERROR, 3)),
    "WINDOW_UPDATE of 3 bytes": (lambda c: c.send(frame(WINDOW_UPDATE, 0, 0, bytes(3))),
                                 ("GOAWAY", FRAME_SIZE_ERROR, 0)),
    "PUSH_PROMISE from a client": (lambda c: (open_stream(c), c.send(frame(PUSH_PROMISE, END_HEADERS, 1, bytes(4)))),
                                   ("GOAWAY", PROTOCOL_ERROR, 0)),
    # SETTINGS ranges
    "ENABLE_PUSH=2": (lambda c: c.send(frame(SETTINGS, 0, 0, struct.pack(">HL", 0x2, 2))),
                      ("GOAWAY", PROTOCOL_ERROR, 0)),
    "MAX_FRAME_SIZE below 2^14": (lambda c: c.send(frame(SETTINGS, 0, 0, struct.pack(">HL", 0x5, 16_383))),
                                  ("GOAWAY", PROTOCOL_ERROR, 0)),
    "MAX_FRAME_SIZE above 2^24-1": (lambda c: c.send(frame(SETTINGS, 0, 0, struct.pack(">HL", 0x5, 1 << 24))),
                                    ("GOAWAY", PROTOCOL_ERROR, 0)),
    "INITIAL_WINDOW_SIZE above 2^31-1": (lambda c: c.send(frame(SETTINGS, 0, 0, struct.pack(">HL", 0x4, 1 << 31))),
                                         ("GOAWAY", FLOW_CONTROL_ERROR, 0)),
    # window arithmetic
    "WINDOW_UPDATE of 0 on the connection": (lambda c: c.send(frame(WINDOW_UPDATE, 0, 0, bytes(4))),
                                             ("GOAWAY", PROTOCOL_ERROR, 0)),
    "WINDOW_UPDATE of 0 on a stream": (lambda c: (open_stream(c), c.send(frame(WINDOW_UPDATE, 0, 1, bytes(4)))),
                                       ("RST_STREAM", PROTOCOL_ERROR, 1)),
    "connection window past 2^31-1": (lambda c: c.send(frame(WINDOW_UPDATE, 0, 0, ((1 << 31) - 1).to_bytes(4, "big"))),
                                      ("GOAWAY", FLOW_CONTROL_ERROR, 0)),
    "stream window past 2^31-1": (lambda c: (open_stream(c), c.send(
        frame(WINDOW_UPDATE, 0, 1, ((1 << 31) - 1).to_bytes(4, "big")))), ("RST_STREAM", FLOW_CONTROL_ERROR, 1)),
    "stream window past 2^31-1 by SETTINGS": (window_past_max_by_settings, ("GOAWAY", FLOW_CONTROL_ERROR, 0)),
    # stream states
    "DATA on stream 0": (lambda c: c.send(frame(DATA, 0, 0, bytes(5))), ("GOAWAY", PROTOCOL_ERROR, 0)),
    "DATA on an idle stream": (lambda c: c.send(frame(DATA, 0, 1, bytes(5))), ("GOAWAY", PROTOCOL_ERROR, 0)),
    "RST_STREAM on an idle stream": (lambda c: c.send(frame(RST_STREAM, 0, 1, bytes(4))),
                                     ("GOAWAY", PROTOCOL_ERROR, 0)),
    "WINDOW_UPDATE on an idle stream": (lambda c: c.send(frame(WINDOW_UPDATE, 0, 1, b"\x00\x00\x00\x01")),
                                        ("GOAWAY", PROTOCOL_ERROR, 0)),
    "DATA after END_STREAM": (lambda c: c.send(frame(HEADERS, END_HEADERS | END_STREAM, 1, c.block()),
                                               frame(DATA, 0, 1, bytes(5))), ("RST_STREAM", STREAM_CLOSED, 1)),
    "DATA on a closed stream": (after_a_call(lambda c: frame(DATA, 0, 5, bytes(5))), ("GOAWAY", STREAM_CLOSED, 0)),
    "HEADERS on a closed stream": (after_a_call(lambda c: frame(HEADERS, END_HEADERS, 5, c.block())),
                                   ("GOAWAY", STREAM_CLOSED, 0)),
    "stream ids going backwards": (after_a_call(lambda c: frame(HEADERS, END_HEADERS, 3, c.block())),
                                   ("GOAWAY", PROTOCOL_ERROR, 0)),
    "HEADERS on an even stream": (lambda c: c.send(frame(HEADERS, END_HEADERS, 2, c.block())),
                                  ("GOAWAY", PROTOCOL_ERROR, 0)),
    "trailers without END_STREAM": (lambda c: (open_stream(c), c.send(
        frame(HEADERS, END_HEADERS, 1, c.block([("x-t", "1")])))), ("RST_STREAM", PROTOCOL_ERROR, 1)),
    "CONTINUATION without HEADERS": (lambda c: c.send(frame(CONTINUATION, END_HEADERS, 1, c.block())),
                                     ("GOAWAY", PROTOCOL_ERROR, 0)),
    "a header block interrupted": (lambda c: c.send(frame(HEADERS, 0, 1, c.block()), frame(PING, 0, 0, bytes(8))),
                                   ("GOAWAY", PROTOCOL_ERROR, 0)),
    # padding
    "DATA padded past its length": (lambda c: (open_stream(c), c.send(frame(DATA, PADDED, 1, b"\x05abcd"))),
                                    ("GOAWAY", PROTOCOL_ERROR, 0)),
    "HEADERS padded past its length": (lambda c: c.send(frame(HEADERS, END_HEADERS | PADDED, 1,
                                                              bytes([200]) + c.block())),
                                       ("GOAWAY", PROTOCOL_ERROR, 0)),
    # what a header block may cost
    "three table size updates": (lambda c: c.send(frame(HEADERS, END_HEADERS, 1, b"\x20\x20\x20" + c.block())),
                                 ("GOAWAY", COMPRESSION_ERROR, 0)),
    "a HEADERS frame past 64 KiB": (lambda c: c.send(frame(HEADERS, END_HEADERS, 1, c.block() + b"\x20" * (64 << 10))),
                                    ("GOAWAY", ENHANCE_YOUR_CALM, 0)),
    "33 CONTINUATION frames": (lambda c: c.send(frame(HEADERS, 0, 1, c.block()),
                                                *(frame(CONTINUATION, 0, 1) for _ in range(33))),
                               ("GOAWAY", ENHANCE_YOUR_CALM, 0)),
    # request headers (RFC 9113 §8.2-8.3)
    "no :path": (request_case(fields_with(drop=":path")), ("RST_STREAM", PROTOCOL_ERROR, 1)),
    "an empty :path": (request_case(fields_with((":path", ""), drop=":path")), ("RST_STREAM", PROTOCOL_ERROR, 1)),
    "an uppercase name": (request_case(fields_with(("X-Upper", "1"))), ("RST_STREAM", PROTOCOL_ERROR, 1)),
    "a connection-specific header": (request_case(fields_with(("connection", "keep-alive"))),
                                     ("RST_STREAM", PROTOCOL_ERROR, 1)),
    "te other than trailers": (request_case(fields_with(("te", "gzip"), drop="te")), ("RST_STREAM", PROTOCOL_ERROR, 1)),
    "a pseudo-header after a regular one": (request_case(fields_with((":authority", "t"), drop=":authority")),
                                            ("RST_STREAM", PROTOCOL_ERROR, 1)),
    "a pseudo-header twice": (request_case(fields_with(first=(":method", "POST"))), ("RST_STREAM", PROTOCOL_ERROR, 1)),
    "a response pseudo-header": (request_case(fields_with(first=(":status", "200"))),
                                 ("RST_STREAM", PROTOCOL_ERROR, 1)),
    "a value with a newline": (request_case(fields_with(("x-v", "a\nb"))), ("RST_STREAM", PROTOCOL_ERROR, 1)),
    "a pseudo-header in trailers": (lambda c: (open_stream(c), c.send(
        frame(HEADERS, END_HEADERS | END_STREAM, 1, c.block([(":path", "/x")])))), ("RST_STREAM", PROTOCOL_ERROR, 1)),
    # content-length against the DATA received (RFC 9113 §8.1.1)
    "DATA past its content-length": (with_length("3", bytes(5)), ("RST_STREAM", PROTOCOL_ERROR, 1)),
    "DATA short of its content-length": (with_length("10", bytes(5)), ("RST_STREAM", PROTOCOL_ERROR, 1)),
    "no DATA for a content-length": (with_length("5", b"", end_on_headers=True), ("RST_STREAM", PROTOCOL_ERROR, 1)),
    "a content-length that is not a number": (with_length("5x", bytes(5)), ("RST_STREAM", PROTOCOL_ERROR, 1)),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_broken_rule_gets_its_error_and_the_server_goes_on(port, case):
    send, expected = CASES[case]
    client = Client(port, PREFACE + frame(PING, 0, 0, bytes(8))) if case == "preface without SETTINGS" else Client(port)
    try:
        send(client)
        assert client.error() == expected
    finally:
        client.sock.close()
    assert served(port), f"a normal client was not served after {case}"


def test_a_normal_client_breaks_no_rule(port):
    """The counterpart of every case: the frames of an ordinary call (padded, with a priority, its header block
    split over CONTINUATIONs, trailers from the client) are answered OK, with no error."""
    client = Client(port)
    try:
        block = client.block()
        client.send(frame(HEADERS, PADDED | 0x20, 1, b"\x02" + bytes(4) + b"\x10" + block[:4] + b"\x00\x00"),
                    frame(CONTINUATION, END_HEADERS, 1, block[4:]), frame(PRIORITY, 0, 1, bytes(4) + b"\x10"),
                    frame(DATA, PADDED, 1, b"\x03" + bytes(5) + b"pad"),
                    frame(HEADERS, END_HEADERS | END_STREAM, 1, client.block([("x-trailer", "1")])),
                    frame(WINDOW_UPDATE, 0, 0, b"\x00\x00\x10\x00"), frame(PING, 0, 0, bytes(8)))
        end = client.read(lambda f: f.type == HEADERS and "END_STREAM" in f.flags or f.type in (GOAWAY, RST_STREAM))
        assert end is not None and end.type == HEADERS and end.stream_id == 1
    finally:
        client.sock.close()
    assert served(port)


def test_a_content_length_equal_to_the_data_is_served(port):
    """The counterpart of the content-length cases: the declared length, in DATA split over two frames (one
    padded, its padding not counted), is answered OK."""
    client = Client(port)
    try:
        client.send(frame(HEADERS, END_HEADERS, 1, client.block(fields_with(("content-length", "5")))),
                    frame(DATA, PADDED, 1, b"\x02" + bytes(2) + b"pd"), frame(DATA, END_STREAM, 1, bytes(3)))
        end = client.read(lambda f: f.type == HEADERS and "END_STREAM" in f.flags or f.type in (GOAWAY, RST_STREAM))
        assert end is not None and end.type == HEADERS and end.stream_id == 1
    finally:
        client.sock.close()


def test_the_advertised_header_list_size_is_the_enforced_one(port):
    """SETTINGS_MAX_HEADER_LIST_SIZE is in the server's SETTINGS, and a request whose header list (RFC 9113
    §6.5.2: names, values and 32 bytes a field) is exactly that size is served, one byte more refused."""
    client = Client(port)
    try:
        first = client.read(lambda f: f.type == SETTINGS and "ACK" not in f.flags)
        assert first is not None
        advertised = first.settings.get(0x6)
        assert advertised is not None, f"no SETTINGS_MAX_HEADER_LIST_SIZE among {dict(first.settings)}"
    finally:
        client.sock.close()

    def request_of(size: int) -> list:
        base = sum(32 + len(k) + len(v) for k, v in REQUEST) + 32 + len("x-pad")
        return fields_with(("x-pad", "a" * (size - base)))

    client = Client(port)
    try:
        client.send(frame(HEADERS, END_HEADERS, 1, client.block(request_of(advertised))),
                    frame(DATA, END_STREAM, 1, bytes(5)))
        end = client.read(lambda f: f.type == HEADERS and "END_STREAM" in f.flags or f.type in (GOAWAY, RST_STREAM))
        assert end is not None and end.type == HEADERS, f"a header list of the advertised {advertised} was refused"
        client.send(frame(HEADERS, END_HEADERS | END_STREAM, 3, client.block(request_of(advertised + 1))))
        assert client.error() == ("GOAWAY", COMPRESSION_ERROR, 0)
    finally:
        client.sock.close()
    assert served(port)


def test_a_reply_reset_while_parked_on_the_clients_window_is_counted_as_a_refusal(tmp_path):
    """A reply that waits --body-timeout-s for a window the client never opens is reset (CANCEL) and counted in
    trainserve_refused_total as every other refusal is; the server goes on."""
    with running_server(make_repository(tmp_path / "repo"), body_timeout_s=0.3) as (srv, ports):
        before = srv.core.refusals.get("grpc", "reply_timeout")
        client = Client(ports["grpc"], PREFACE + frame(SETTINGS, 0, 0, struct.pack(">HL", 0x4, 0)))
        try:
            client.send(frame(HEADERS, END_HEADERS, 1, client.block()), frame(DATA, END_STREAM, 1, bytes(5)))
            assert client.error() == ("RST_STREAM", CANCEL, 1)
        finally:
            client.sock.close()
        deadline = time.monotonic() + 2.0
        while srv.core.refusals.get("grpc", "reply_timeout") == before and time.monotonic() < deadline:
            time.sleep(0.02)
        assert srv.core.refusals.get("grpc", "reply_timeout") == before + 1
        text = urllib.request.urlopen(f"http://127.0.0.1:{ports['metrics']}/metrics", timeout=10).read().decode()
        assert f'trainserve_refused_total{{frontend="grpc",reason="reply_timeout"}} {before + 1:.1f}\n' in text
        assert served(ports["grpc"])
