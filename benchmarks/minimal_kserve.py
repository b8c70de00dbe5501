"""The baseline: a minimal KServe v2 HTTP server around one onnxruntime session, no batching.

Just enough of the protocol for tritonclient.http with the binary tensor extension: readiness and
POST /v2/models/<name>/infer with binary inputs and binary outputs. Each request runs alone,
inline on the event loop: this is what "wrap a session in a web handler" gives you.

    python benchmarks/minimal_kserve.py MODEL.onnx --name cnn --port 0 --threads 2
(prints "listening on PORT" once ready)
"""

from __future__ import annotations

import argparse
import json

import numpy as np
import onnxruntime as ort
from aiohttp import web

DTYPES = {"FP32": np.float32, "FP64": np.float64, "INT64": np.int64, "INT32": np.int32, "UINT8": np.uint8}
NAMES = {np.dtype(v): k for k, v in DTYPES.items()}


def make_app(session: ort.InferenceSession, name: str) -> web.Application:
    outputs = [o.name for o in session.get_outputs()]

    async def ready(request: web.Request) -> web.Response:
        return web.Response()

    async def infer(request: web.Request) -> web.Response:
        if request.match_info["model"] != name:
            return web.json_response({"error": f"Request for unknown model: '{request.match_info['model']}'"}, status=404)
        body = await request.read()
        size = int(request.headers.get("Inference-Header-Content-Length", len(body)))
        header = json.loads(body[:size])
        feed, offset = {}, size
        for tensor in header["inputs"]:  # binary data follows the JSON header, input after input
            n = tensor["parameters"]["binary_data_size"]
            feed[tensor["name"]] = np.frombuffer(body[offset:offset + n], DTYPES[tensor["datatype"]]).reshape(tensor["shape"])
            offset += n
        results = session.run(outputs, feed)
        out_meta, blobs = [], []
        for out_name, array in zip(outputs, results):
            blob = array.tobytes()
            out_meta.append({"name": out_name, "datatype": NAMES[array.dtype], "shape": list(array.shape),
                             "parameters": {"binary_data_size": len(blob)}})
            blobs.append(blob)
        head = json.dumps({"model_name": name, "id": header.get("id", ""), "outputs": out_meta}).encode()
        return web.Response(body=head + b"".join(blobs), content_type="application/octet-stream",
                            headers={"Inference-Header-Content-Length": str(len(head))})

    app = web.Application(client_max_size=64 << 20)
    app.router.add_get("/v2/health/ready", ready)
    app.router.add_get("/v2/health/live", ready)
    app.router.add_post("/v2/models/{model}/infer", infer)
    app.router.add_post("/v2/models/{model}/versions/{version}/infer", infer)
    return app


async def serve(args: argparse.Namespace) -> None:
    import asyncio

    so = ort.SessionOptions()
    so.intra_op_num_threads = args.threads
    so.inter_op_num_threads = 1
    if args.no_spin:  # idle intra-op threads sleep instead of spinning on the cores the event loop needs
        so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    session = ort.InferenceSession(args.model, sess_options=so, providers=[args.provider])
    runner = web.AppRunner(make_app(session, args.name), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", args.port)
    await site.start()
    print(f"listening on {site._server.sockets[0].getsockname()[1]}", flush=True)
    await asyncio.Event().wait()  # until killed


def main() -> None:
    import asyncio

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("--name", default="model")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--threads", type=int, default=2, help="onnxruntime intra-op threads")
    parser.add_argument("--provider", default="CPUExecutionProvider")
    parser.add_argument("--no-spin", action="store_true", help="onnxruntime intra-op threads do not spin when idle")
    asyncio.run(serve(parser.parse_args()))


if __name__ == "__main__":
    main()
