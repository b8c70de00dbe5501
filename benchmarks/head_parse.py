"""The lean HTTP path's request-head parsing: the hand-written parser (serve/protocol/http_fast.py) against the
same job done by httptools (llhttp, uvicorn's parser), side by side in one process, per head.

    python benchmarks/head_parse.py [--heads 200000] [--rounds 5]

Both parse the head tritonclient sends for a binary infer request and return the same tuple
(model, version, Inference-Header-Content-Length, Content-Length). Prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httptools  # noqa: E402

from trainserve.serve.protocol.http_fast import FastConnection, _infer_target  # noqa: E402

HEAD = (b"POST /v2/models/cnn_cpu/infer HTTP/1.1\r\nHost: 127.0.0.1:8000\r\nUser-Agent: python/gevent-http-client-1.5.3"
        b"\r\nInference-Header-Content-Length: 167\r\nContent-Length: 12455\r\nConnection: keep-alive")


class _Frontend:
    max_body_bytes = 64 << 20


class _Collector:
    """httptools callbacks: the target and the few headers the lean path reads."""

    __slots__ = ("url", "headers", "done")

    def __init__(self) -> None:
        self.url = b""
        self.headers: list[tuple[bytes, bytes]] = []
        self.done = False

    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name, value))

    def on_headers_complete(self) -> None:
        self.done = True


def parse_with_httptools(head: bytes, max_body_bytes: int):
    """What FastConnection._parse_head returns, with llhttp doing the parsing."""
    c = _Collector()
    parser = httptools.HttpRequestParser(c)
    try:
        parser.feed_data(head + b"\r\n\r\n")
    except httptools.HttpParserError:
        return None
    if parser.get_method() != b"POST" or parser.get_http_version() != "1.1" or not parser.should_keep_alive():
        return None
    target = _infer_target(c.url)
    if target is None:
        return None
    length = header_length = None
    for name, value in c.headers:
        name = name.lower()
        if name == b"content-length":
            if length is not None:
                return None
            length = int(value)
        elif name == b"inference-header-content-length":
            header_length = value.decode("latin-1")
        elif name in (b"transfer-encoding", b"expect", b"upgrade") or (
                name == b"content-encoding" and value.lower() != b"identity"):
            return None
    if length is None or length > max_body_bytes:
        return None
    return target[0], target[1], header_length, length


def per_head_us(fn, n: int) -> float:
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t0) / n * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--heads", type=int, default=200_000, help="heads parsed per round and parser")
    parser.add_argument("--rounds", type=int, default=5, help="rounds; the figures are medians")
    args = parser.parse_args()
    conn = FastConnection(_Frontend(), None, lambda: None)  # type: ignore[arg-type]
    expected = conn._parse_head(HEAD)
    assert parse_with_httptools(HEAD, _Frontend.max_body_bytes) == expected, "the two parsers disagree"
    hand, llhttp = [], []
    for _ in range(args.rounds):  # alternate, so load from others falls on both alike
        hand.append(per_head_us(lambda: conn._parse_head(HEAD), args.heads))
        llhttp.append(per_head_us(lambda: parse_with_httptools(HEAD, _Frontend.max_body_bytes), args.heads))
    h, l = statistics.median(hand), statistics.median(llhttp)
    print(json.dumps({"hand_written_us": round(h, 3), "httptools_us": round(l, 3), "httptools_over_hand": round(l / h, 2),
                      "heads": args.heads, "rounds": args.rounds}))


if __name__ == "__main__":
    main()
