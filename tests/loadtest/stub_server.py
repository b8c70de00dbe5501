"""A tiny stand-in KServe v2 HTTP server (aiohttp) with canned answers, for load-generator tests.

It answers the endpoints the load generator uses (server and model metadata, Triton's model config,
readiness, binary-tensor inference, /metrics) with a fixed model: input "input" FP32 [-1, 4],
output "logits" FP32 [-1, 3] filled with zeros. It does no real work, so it is never the
bottleneck when measuring the load generator's own cost; and it can misbehave on purpose:

    --stall-at S --stall-for D   every request arriving in [S, S+D) s after the first inference
                                 is held until S+D (a server that stalls)
    --fail-after N               inference requests after the N-th answer HTTP 500
    --capacity R                 answers at most R requests/s, first come first served (a token bucket
                                 of R/s with a burst of R/20): a known capacity for the rate search
    --slow-first-s S --slow-ms M every request arriving in the first S s after the first inference
                                 takes M ms longer (a server warming up)
    --unstable-period P --unstable-ms M   in every other P-second phase each request takes M ms
                                 longer (a server that never settles)

Run: python tests/loadtest/stub_server.py --port 0   (prints "stub-server ready http_port=N")
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time

from aiohttp import web

MODEL = {
    "name": "stub",
    "versions": ["1"],
    "platform": "onnxruntime_onnx",
    "inputs": [{"name": "input", "datatype": "FP32", "shape": [-1, 4]}],
    "outputs": [{"name": "logits", "datatype": "FP32", "shape": [-1, 3]}],
}
CONFIG = {
    "name": "stub",
    "max_batch_size": 64,
    "backend": "onnxruntime",
    "instance_group": [{"kind": "KIND_CPU", "count": 1}],
}


def build_app(model: str = "stub", stall_at: float | None = None, stall_for: float = 0.0,
              fail_after: int | None = None, capacity: float | None = None, slow_first_s: float = 0.0,
              slow_ms: float = 0.0, unstable_period: float = 0.0, unstable_ms: float = 0.0) -> web.Application:
    state = {"first": None, "served": 0, "tat": 0.0}
    canned: dict[int, tuple[bytes, str]] = {}

    def answer(batch: int) -> tuple[bytes, str]:
        if batch not in canned:
            nbytes = batch * 3 * 4
            header = json.dumps({"model_name": model, "model_version": "1", "outputs": [{
                "name": "logits", "datatype": "FP32", "shape": [batch, 3],
                "parameters": {"binary_data_size": nbytes}}]}).encode()
            canned[batch] = (header + bytes(nbytes), str(len(header)))
        return canned[batch]

    async def server_meta(_: web.Request) -> web.Response:
        return web.json_response({"name": "stub-kserve", "version": "0.0", "extensions": ["binary_tensor_data"]})

    async def ok(_: web.Request) -> web.Response:
        return web.Response(status=200)

    def known(request: web.Request) -> bool:
        return request.match_info["model"] == model

    async def model_ready(request: web.Request) -> web.Response:
        return web.Response(status=200 if known(request) else 400)

    async def model_meta(request: web.Request) -> web.Response:
        if not known(request):
            return web.json_response({"error": f"Request for unknown model: '{request.match_info['model']}' "
                                      "is not found"}, status=400)
        return web.json_response({**MODEL, "name": model})

    async def model_config(request: web.Request) -> web.Response:
        if not known(request):
            return web.json_response({"error": "unknown model"}, status=400)
        return web.json_response({**CONFIG, "name": model})

    async def infer(request: web.Request) -> web.Response:
        body = await request.read()
        now = time.monotonic()
        if state["first"] is None:
            state["first"] = now
        if stall_at is not None:
            t = now - state["first"]
            if stall_at <= t < stall_at + stall_for:
                await asyncio.sleep(stall_at + stall_for - t)
        t = now - state["first"]
        delay = slow_ms / 1000.0 if t < slow_first_s else 0.0
        if unstable_period and int(t // unstable_period) % 2:
            delay += unstable_ms / 1000.0
        if capacity:
            # GCRA: each request takes the next slot of 1/R s; up to R/20 slots may be used ahead
            state["tat"] = max(state["tat"], now) + 1.0 / capacity
            delay += max(0.0, state["tat"] - (max(1.0, capacity / 20.0)) / capacity - now)
        if delay > 0:
            await asyncio.sleep(delay)
        state["served"] += 1
        if fail_after is not None and state["served"] > fail_after:
            return web.json_response({"error": "stub server failing on purpose"}, status=500)
        hlen = int(request.headers.get("Inference-Header-Content-Length", len(body)))
        shape = json.loads(body[:hlen])["inputs"][0]["shape"]
        payload, header_len = answer(int(shape[0]))
        return web.Response(body=payload, headers={"Inference-Header-Content-Length": header_len},
                            content_type="application/octet-stream")

    async def metrics(_: web.Request) -> web.Response:
        n = state["served"]
        text = (f'nv_inference_request_success{{model="{model}",version="1"}} {n}\n'
                f'nv_inference_count{{model="{model}",version="1"}} {n}\n'
                f'nv_inference_exec_count{{model="{model}",version="1"}} {n}\n'
                f'nv_inference_queue_duration_us{{model="{model}",version="1"}} {n * 10}\n'
                f'nv_inference_compute_infer_duration_us{{model="{model}",version="1"}} {n * 50}\n'
                "nv_cpu_utilization 0.25\n")
        return web.Response(text=text)

    app = web.Application()
    app.router.add_get("/v2", server_meta)
    app.router.add_get("/v2/health/ready", ok)
    app.router.add_get("/v2/health/live", ok)
    app.router.add_get("/v2/models/{model}/ready", model_ready)
    app.router.add_get("/v2/models/{model}", model_meta)
    app.router.add_get("/v2/models/{model}/config", model_config)
    app.router.add_post("/v2/models/{model}/infer", infer)
    app.router.add_get("/metrics", metrics)
    return app


async def _main(args: argparse.Namespace) -> None:
    app = build_app(args.model, args.stall_at, args.stall_for, args.fail_after, args.capacity, args.slow_first_s,
                    args.slow_ms, args.unstable_period, args.unstable_ms)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", args.port)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    print(f"stub-server ready http_port={port}", flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--model", default="stub")
    p.add_argument("--stall-at", type=float, default=None)
    p.add_argument("--stall-for", type=float, default=0.0)
    p.add_argument("--fail-after", type=int, default=None)
    p.add_argument("--capacity", type=float, default=None)
    p.add_argument("--slow-first-s", type=float, default=0.0)
    p.add_argument("--slow-ms", type=float, default=0.0)
    p.add_argument("--unstable-period", type=float, default=0.0)
    p.add_argument("--unstable-ms", type=float, default=0.0)
    try:
        asyncio.run(_main(p.parse_args()))
    except KeyboardInterrupt:
        pass
