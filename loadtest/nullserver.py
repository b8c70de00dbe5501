"""A null endpoint: answers every inference request at once with one canned answer (HTTP/1.1 or gRPC).

`python -m trainserve.loadtest.nullserver http|grpc ANSWER_FILE` listens on a free loopback port and
prints "port N". The answer is a real server's answer to the same request, captured beforehand
(trainserve.loadtest.attribution), so the client parses exactly what it parses under load. It does
no work of its own beyond reading the request, which is what makes it a floor to calibrate the
client's own time against. Runs in its own process, so its CPU is not counted as the client's.
"""

from __future__ import annotations

import socket
import sys
from pathlib import Path

MODEL_INFER = "/inference.GRPCInferenceService/ModelInfer"


def _serve_http(answer: bytes) -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    print(f"port {listener.getsockname()[1]}", flush=True)
    while True:  # one connection at a time, on the main thread: the calibration's one client, and its CPU
        conn, _ = listener.accept()  # stays on a thread that outlives it (the caller reads it per thread)
        _http_connection(conn, answer)


def _http_connection(conn: socket.socket, answer: bytes) -> None:
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    buf = b""
    with conn:
        while True:
            while b"\r\n\r\n" not in buf:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                buf += chunk
            head, _, buf = buf.partition(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value.strip())
            while len(buf) < length:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                buf += chunk
            buf = buf[length:]
            conn.sendall(answer)


def _serve_grpc(answer: bytes) -> None:
    from concurrent import futures

    import grpc

    def infer(request: bytes, context: object) -> bytes:
        return answer

    # no (de)serializers: the request stays bytes and the canned answer goes out as it is
    handler = grpc.method_handlers_generic_handler("inference.GRPCInferenceService", {
        "ModelInfer": grpc.unary_unary_rpc_method_handler(infer)})
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4), handlers=[handler])
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    print(f"port {port}", flush=True)
    server.wait_for_termination()


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in ("http", "grpc"):
        print("usage: python -m trainserve.loadtest.nullserver http|grpc ANSWER_FILE", file=sys.stderr)
        return 2
    answer = Path(argv[1]).read_bytes()
    (_serve_http if argv[0] == "http" else _serve_grpc)(answer)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
