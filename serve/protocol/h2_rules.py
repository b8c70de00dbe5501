"""What HTTP/2 (RFC 9113) and HPACK (RFC 7541) allow a client to send, for serve/protocol/h2_connection.py.

The checks that do not belong on the path of an ordinary call: control frames' streams and lengths, SETTINGS'
ranges, padding, the size updates at a header block's start, and a request's header fields (RFC 9113 §8.2-8.3)
and its content-length (§8.1.1).
A broken rule raises H2Error, a connection error (GOAWAY) unless it names a stream (then RST_STREAM on it).
The frame and error constants are the RFC's names, shared with the gRPC front end's HTTP/2 modules.
"""

from __future__ import annotations

import re
import struct

DATA, HEADERS, PRIORITY, RST_STREAM, SETTINGS, PUSH_PROMISE, PING, GOAWAY, WINDOW_UPDATE, CONTINUATION = range(10)
END_STREAM, ACK, END_HEADERS, PADDED, PRIORITY_FLAG = 0x1, 0x1, 0x4, 0x8, 0x20
NO_ERROR, PROTOCOL_ERROR, FLOW_CONTROL_ERROR, STREAM_CLOSED, FRAME_SIZE_ERROR, REFUSED_STREAM, CANCEL = \
    0x0, 0x1, 0x3, 0x5, 0x6, 0x7, 0x8
COMPRESSION_ERROR, ENHANCE_YOUR_CALM = 0x9, 0xB
S_HEADER_TABLE_SIZE, S_ENABLE_PUSH, S_MAX_CONCURRENT_STREAMS, S_INITIAL_WINDOW_SIZE, S_MAX_FRAME_SIZE = \
    0x1, 0x2, 0x3, 0x4, 0x5
S_MAX_HEADER_LIST_SIZE = 0x6
MAX_WINDOW = (1 << 31) - 1  # the largest flow-control window HTTP/2 allows, bytes
MIN_FRAME, MAX_FRAME_LIMIT = 1 << 14, (1 << 24) - 1  # SETTINGS_MAX_FRAME_SIZE's allowed range, bytes

# Control frames: the length each must have, and whether it belongs to the connection (stream 0) or a stream.
_LENGTH = {PING: 8, RST_STREAM: 4, WINDOW_UPDATE: 4, PRIORITY: 5}
_ON_CONNECTION = {SETTINGS: True, PING: True, GOAWAY: True, RST_STREAM: False, PRIORITY: False}

_CONNECTION_SPECIFIC = frozenset((b"connection", b"keep-alive", b"proxy-connection", b"transfer-encoding",
                                  b"upgrade"))
_REQUEST_PSEUDO = frozenset((b":method", b":scheme", b":authority", b":path"))
_REQUIRED = frozenset((b":method", b":scheme", b":path"))  # a request other than CONNECT, as every gRPC call
_BAD_NAME = re.compile(rb"[^!-@\[-~]")  # outside visible ASCII, or uppercase (RFC 9113 §8.2.1)
_BAD_VALUE = re.compile(rb"[\x00\r\n]|^[ \t]|[ \t]$")  # NUL, CR, LF, or whitespace at either end


class H2Error(Exception):
    """A broken rule: `stream` 0 for a connection error (GOAWAY `code`), else a stream error (RST_STREAM)."""

    def __init__(self, code: int, why: str, stream: int = 0) -> None:
        super().__init__(why)
        self.code, self.why, self.stream = code, why, stream


def check_control(kind: int, flags: int, stream_id: int, length: int) -> None:
    """A control frame's stream (0 or not) and length, as RFC 9113 §6 fixes them."""
    on_connection = _ON_CONNECTION.get(kind)
    if on_connection is not None and (stream_id == 0) != on_connection:
        raise H2Error(PROTOCOL_ERROR, f"a frame of type {kind} on stream {stream_id}")
    expected = _LENGTH.get(kind)
    if expected is not None and length != expected:
        # PRIORITY's is a stream error (§6.3); the others may alter the connection's state
        raise H2Error(FRAME_SIZE_ERROR, f"a frame of type {kind} of {length} bytes, not {expected}",
                      stream_id if kind == PRIORITY else 0)
    if kind == SETTINGS and (length % 6 or (flags & ACK and length)):
        raise H2Error(FRAME_SIZE_ERROR, f"SETTINGS of {length} bytes" + (" with ACK" if flags & ACK else ""))
    if kind == GOAWAY and length < 8:
        raise H2Error(FRAME_SIZE_ERROR, f"GOAWAY of {length} bytes")


def settings(payload: bytes) -> list[tuple[int, int]]:
    """The (identifier, value) pairs of a SETTINGS frame, each value within its allowed range (§6.5.2)."""
    pairs = list(struct.iter_unpack(">HL", payload))
    for ident, value in pairs:
        if ident == S_ENABLE_PUSH and value > 1:
            raise H2Error(PROTOCOL_ERROR, f"SETTINGS_ENABLE_PUSH={value}")
        if ident == S_INITIAL_WINDOW_SIZE and value > MAX_WINDOW:
            raise H2Error(FLOW_CONTROL_ERROR, f"SETTINGS_INITIAL_WINDOW_SIZE={value} exceeds 2^31-1")
        if ident == S_MAX_FRAME_SIZE and not MIN_FRAME <= value <= MAX_FRAME_LIMIT:
            raise H2Error(PROTOCOL_ERROR, f"SETTINGS_MAX_FRAME_SIZE={value} outside 2^14..2^24-1")
    return pairs


def unpad(payload: bytes | memoryview) -> bytes | memoryview:
    """A PADDED frame's content without its pad length and padding; padding as long as the frame is an error."""
    if not payload or payload[0] >= len(payload):
        raise H2Error(PROTOCOL_ERROR, "padding as long as the frame or longer")
    return payload[1:len(payload) - payload[0]]


def check_size_updates(block: bytes) -> None:
    """At most two dynamic-table size updates at a block's start (RFC 7541 §4.2): the third is refused before it
    is decoded, so a block made of them costs nothing (the decoder refuses those after a field itself)."""
    pos, n = 0, 0
    while pos < len(block) and block[pos] & 0xE0 == 0x20:
        n += 1
        if n > 2:
            raise H2Error(COMPRESSION_ERROR, "more than two table size updates at a header block's start")
        if block[pos] & 0x1F == 0x1F:  # the integer continues in the bytes with the high bit set
            pos += 1
            while pos < len(block) and block[pos] & 0x80:
                pos += 1
        pos += 1


def _field_problem(name: bytes, value: bytes) -> str:
    if _BAD_NAME.search(name, 1 if name[:1] == b":" else 0) or not name or name == b":":
        return f"the field name {name!r} is not a lowercase token"
    if _BAD_VALUE.search(value):
        return f"the value of {name.decode('latin-1')} holds NUL, CR, LF or surrounding whitespace"
    if name in _CONNECTION_SPECIFIC:
        return f"the connection-specific field {name.decode('latin-1')}"
    if name == b"te" and value != b"trailers":
        return f"te: {value.decode('latin-1')} (only 'trailers' is allowed)"
    return ""


def request_problem(fields: list[tuple[bytes, bytes]]) -> str:
    """Why a request's header fields are malformed (RFC 9113 §8.2-8.3), or '' when they are not."""
    seen: set[bytes] = set()
    regular = False
    for name, value in fields:
        if problem := _field_problem(name, value):
            return problem
        if name[:1] == b":":
            if regular:
                return f"the pseudo-header {name.decode('latin-1')} after a regular field"
            if name not in _REQUEST_PSEUDO:
                return f"the pseudo-header {name.decode('latin-1')} in a request"
            if name in seen:
                return f"the pseudo-header {name.decode('latin-1')} twice"
            if name == b":path" and not value:
                return "an empty :path"
            seen.add(name)
        else:
            regular = True
            if name == b"content-length":
                if not value.isdigit() or len(value) > 18:
                    return f"content-length: {value.decode('latin-1')} (not a number of bytes)"
                if name in seen:
                    return "content-length twice"
                seen.add(name)
    if not _REQUIRED <= seen:
        return "a request without :method, :scheme and :path"
    return ""


def content_length(fields: list[tuple[bytes, bytes]]) -> int:
    """The request's content-length (bytes its DATA must add up to, RFC 9113 §8.1.1), or -1 when it has none;
    its value was checked by request_problem."""
    for name, value in fields:
        if name == b"content-length":
            return int(value)
    return -1


def trailers_problem(fields: list[tuple[bytes, bytes]]) -> str:
    """Why a request's trailers are malformed (no pseudo-headers, the fields' own rules), or ''."""
    for name, value in fields:
        if name[:1] == b":":
            return f"the pseudo-header {name.decode('latin-1')} in trailers"
        if problem := _field_problem(name, value):
            return problem
    return ""
