"""Exercises loadtest/rawhttp.py under gevent (as inside Locust) against answers sent byte by byte.

Run by tests/loadtest/test_rawhttp.py in a child process (the monkey-patching must not leak into
pytest); prints one JSON line of results.
"""

from gevent import monkey

monkey.patch_all()

import json  # noqa: E402
import socket  # noqa: E402
import time  # noqa: E402

import gevent  # noqa: E402
from gevent.server import StreamServer  # noqa: E402

from trainserve.loadtest.rawhttp import RawHttpClient, encode_request, header  # noqa: E402

BODY = b'{"x":1}' + bytes(range(200))
ANSWERS = {
    # Content-Length body in three pieces, header names in odd case
    b"/split": [b"HTTP/1.1 200 OK\r\nInference-Header-Content-Length: 7\r\nconTent-LENGTH: %d\r\n" % len(BODY),
                b"\r\n" + BODY[:50], BODY[50:]],
    b"/chunked": [b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", b"5\r\nhello\r\n6\r\n world\r\n",
                  b"0\r\n\r\n"],
    b"/error": [b"HTTP/1.1 400 Bad Request\r\nContent-Length: 17\r\n\r\n{\"error\":\"nope\"}\n"],
    b"/close": [b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nto the end"],
}


def handle(sock: socket.socket, _addr: object) -> None:
    buf = b""
    while True:
        while b"\r\n\r\n" not in buf:
            data = sock.recv(65536)
            if not data:
                return
            buf += data
        head, _, rest = buf.partition(b"\r\n\r\n")
        n = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
        while len(rest) < n:
            rest += sock.recv(65536)
        buf = rest[n:]
        path = head.split(b" ")[1]
        if path == b"/stall":
            gevent.sleep(30)
            return
        for piece in ANSWERS[path]:
            sock.sendall(piece)
            gevent.sleep(0.01)
        if path == b"/close":
            sock.close()
            return


def main() -> None:
    server = StreamServer(("127.0.0.1", 0), handle)
    server.start()
    port = server.server_port
    client = RawHttpClient("127.0.0.1", port, timeout_s=0.5)
    out = {}
    for path in ("/split", "/split", "/chunked", "/error", "/close", "/split"):
        req = encode_request("POST", f"127.0.0.1:{port}", path, {"X-Test": "1"}, b"abc")
        status, head, body = client.send(req)
        out.setdefault(path, []).append({"status": status, "body": body.decode("latin-1"),
                                         "ihcl": header(head, "Inference-Header-Content-Length"),
                                         "open": len(client.conns)})
    req = encode_request("POST", f"127.0.0.1:{port}", "/stall", {}, b"")
    t0 = time.perf_counter()
    try:
        client.send(req)
        out["stall"] = "answered"
    except TimeoutError as e:
        out["stall"] = {"error": str(e), "after_s": time.perf_counter() - t0, "open": len(client.conns)}
    client.close()
    server.stop()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
