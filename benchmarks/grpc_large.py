"""Large gRPC messages: this project's HTTP/2 server against grpc.aio (TRAINSERVE_SERVE_GRPC=aio), alternating.

One in-process server (tests/serve/inprocess.py) per point on the tiny `ints` model (tests/serve/tiny_models.py),
one tritonclient.grpc client in the same process sending a 2 MiB INT64 request, 20 calls of warm-up then
--calls timed; wall and process CPU per call (the client's and the server's together).

    python benchmarks/grpc_large.py                       # h2,aio,h2,aio,h2,aio; 200 calls each
    python benchmarks/grpc_large.py --order aio,h2 --calls 500
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--order", default="h2,aio,h2,aio,h2,aio", help="servers in turn: h2 and/or aio, comma-separated")
    ap.add_argument("--calls", type=int, default=200)
    a = ap.parse_args()
    import tritonclient.grpc as tg

    from tests.serve.inprocess import running_server
    from tests.serve.tiny_models import make_repository

    repo = make_repository(Path(tempfile.mkdtemp()), classifier_delay_us=0)
    data = np.ones((4, 65536), np.int64)  # 2 MiB
    for impl in a.order.split(","):
        os.environ["TRAINSERVE_SERVE_GRPC"] = impl
        with running_server(repo) as (_, ports):
            client = tg.InferenceServerClient(f"127.0.0.1:{ports['grpc']}")
            x = tg.InferInput("input_ids", list(data.shape), "INT64").set_data_from_numpy(data)
            for _ in range(20):
                client.infer("ints", [x])
            t0, c0 = time.perf_counter(), time.process_time()
            for _ in range(a.calls):
                client.infer("ints", [x])
            wall, cpu = (time.perf_counter() - t0) / a.calls, (time.process_time() - c0) / a.calls
            print(f"{impl:>3}: 2 MiB request: wall {wall * 1e3:.2f} ms/call, process CPU {cpu * 1e3:.2f} ms/call")
            client.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
