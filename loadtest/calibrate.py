"""The calibration's client: the load's own client code, under gevent as in a Locust worker, against the null endpoint.

`python -m trainserve.loadtest.calibrate SPEC_JSON` reads the model's metadata from the real server,
builds the same request the users send, makes `calls` timed calls to the null endpoint after a
warm-up, from a greenlet as a Locust user does, and prints {"cpu_s", "wall_s", "median_call_s", "calls"} as
one JSON line. It runs in its own process because Locust's environment (gevent's monkey-patching,
gRPC on gevent's loop) costs the client time of its own, which is what is being calibrated, and
must not be switched on in `trainserve load` itself.
"""

from __future__ import annotations

from gevent import monkey

monkey.patch_all()  # before anything opens a socket, as locust does at import

import json  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

import gevent  # noqa: E402
import grpc.experimental.gevent as _grpc_gevent  # noqa: E402

_grpc_gevent.init_gevent()


def main(spec: dict) -> dict:
    from trainserve.loadtest.clients import GrpcInfer, HttpInfer
    from trainserve.loadtest.model_info import build_arrays, fetch_model_info

    info = fetch_model_info(spec["server"], spec["model"], spec["protocol"])
    arrays = build_arrays(info, spec["batch"], spec["input_data"])
    null, want = spec["null"], spec["want_outputs"]
    client = (GrpcInfer(null, info, arrays, want_outputs=want) if spec["protocol"] == "grpc" else
              HttpInfer(null, info, arrays, mode=spec["http_client"], want_outputs=want))

    def run() -> dict:
        for _ in range(spec["warmup"]):
            client.call()
        clock, each = time.perf_counter, []
        cpu0, wall0 = time.process_time(), clock()
        for _ in range(spec["calls"]):
            t = clock()
            client.call()
            each.append(clock() - t)
        cpu, wall = time.process_time() - cpu0, clock() - wall0
        each.sort()
        # the median call: a busy machine's scheduling delays land in a few calls, not in every one
        return {"cpu_s": cpu, "wall_s": wall, "median_call_s": each[len(each) // 2], "calls": spec["calls"]}

    try:
        return gevent.spawn(run).get()  # one user's greenlet, as Locust runs it
    finally:
        client.close()


if __name__ == "__main__":
    print(json.dumps(main(json.loads(sys.argv[1]))), flush=True)
    sys.stdout.flush()
    import os

    os._exit(0)  # a gRPC channel torn down under gevent at exit can hang (see loadtest/locustfile.py)
