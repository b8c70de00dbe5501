"""The bytes of gRPC over HTTP/2 that serve/protocol/grpc_h2.py writes and reads past the frames' rules: a frame's header,
the HPACK of its replies' headers and trailers, a gRPC message's prefix, grpc-timeout, and compressed messages."""

from __future__ import annotations

import struct
import zlib
from urllib.parse import quote

import grpc

SERVICE = "/inference.GRPCInferenceService/"  # the prefix of every method's :path
HEAD = struct.Struct(">BHBBL")  # a frame header: length (24 bits as 8 + 16), type, flags, stream id
MESSAGE = struct.Struct(">BL")  # a gRPC message's prefix: compressed flag, length


def frame(kind: int, flags: int, stream: int, payload: bytes = b"") -> bytes:
    n = len(payload)
    return HEAD.pack(n >> 16, n & 0xFFFF, kind, flags, stream) + payload


def _int(value: int, prefix_bits: int, first: int) -> bytes:
    """An HPACK integer with an N-bit prefix, `first` holding the representation's high bits."""
    top = (1 << prefix_bits) - 1
    if value < top:
        return bytes([first | value])
    out, value = [first | top], value - top
    while value >= 128:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _literal(name: bytes, value: bytes) -> bytes:
    """A header field as a literal without indexing, new name, no Huffman coding: the server's blocks never
    touch the client's decoding table."""
    return b"\x00" + _int(len(name), 7, 0) + name + _int(len(value), 7, 0) + value


# The reply's header block: ":status: 200" (static table entry 8) and content-type: application/grpc
RESPONSE_HEADERS = b"\x88" + b"\x0f\x10" + _int(16, 7, 0) + b"application/grpc"
OK_TRAILERS = _literal(b"grpc-status", b"0")


def status_trailers(code: grpc.StatusCode, message: str) -> bytes:
    block = _literal(b"grpc-status", str(code.value[0]).encode())
    if message:  # percent-encoded as gRPC's spec asks (everything outside printable ASCII, and %)
        block += _literal(b"grpc-message", quote(message, safe=" !\"#$&'()*+,-./:;<=>?@[\\]^_`{|}~").encode())
    return block


def timeout_s(value: bytes) -> float | None:
    """grpc-timeout ("100m", "5S", ...) in seconds; None when malformed (then ignored, as grpc does)."""
    units = {b"H": 3600.0, b"M": 60.0, b"S": 1.0, b"m": 1e-3, b"u": 1e-6, b"n": 1e-9}
    if len(value) < 2 or value[-1:] not in units or not value[:-1].isdigit():
        return None
    return int(value[:-1]) * units[value[-1:]]


def too_many(path: str, n: int) -> str:
    return f"the {path[len(SERVICE):]} call carried {n} messages; it takes one"


def complete_messages(data: bytearray, pos: int) -> int:
    """How many whole messages `data` holds from `pos` on (for the answer to a unary call that sent several)."""
    n = 0
    while len(data) - pos >= 5 and len(data) - pos - 5 >= (length := MESSAGE.unpack_from(data, pos)[1]):
        n, pos = n + 1, pos + 5 + length
    return n


class Aborted(Exception):
    """context.abort(code, details) from a servicer method: the call ends with that status."""

    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(details)
        self.code, self.details = code, details


def inflate(encoding: bytes, message: bytes, limit: int) -> bytes:
    """A compressed message inflated (grpc-encoding gzip or deflate) up to `limit` bytes; Aborted past it."""
    if encoding == b"gzip":
        inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
    elif encoding == b"deflate":
        inflater = zlib.decompressobj()
    else:
        raise Aborted(grpc.StatusCode.UNIMPLEMENTED,
                       f"a compressed message with grpc-encoding '{encoding.decode('latin-1')}': this "
                       "server inflates gzip and deflate only; send those or uncompressed messages")
    try:
        out = inflater.decompress(message, limit + 1)
    except zlib.error as error:
        raise Aborted(grpc.StatusCode.INTERNAL, f"the compressed message cannot be inflated: {error}") from None
    if len(out) > limit or inflater.unconsumed_tail:
        raise Aborted(grpc.StatusCode.RESOURCE_EXHAUSTED,
                       f"Received message larger than max (more than {limit} bytes inflated vs. {limit})")
    return out
