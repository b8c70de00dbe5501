"""One sequential client's median round trip to a served model beside the null endpoint's with the same answer.

The load generator's prepared HTTP client (loadtest/clients.HttpInfer) calls the server, then a null endpoint
that sends back the server's own answer at once (loadtest/attribution), then the server again: the difference
is the server's whole share of a lone request, its timed statistics included. Read the server's statistics
(`GET /v2/models/<m>/stats`) beside it for the part it times itself.

    python benchmarks/null_rtt.py --url 127.0.0.1:8000 --model m --calls 3000
"""

from __future__ import annotations

import argparse
import statistics
import time

from trainserve.loadtest.attribution import capture_answer, null_endpoint
from trainserve.loadtest.clients import HttpInfer
from trainserve.loadtest.model_info import build_arrays, fetch_model_info

WARMUP_CALLS = 50


def median_rtt_ms(url: str, info, arrays, calls: int) -> float:
    client = HttpInfer(url, info, arrays)
    try:
        for _ in range(WARMUP_CALLS):
            client.call()
        times = []
        for _ in range(calls):
            t = time.perf_counter()
            client.call()
            times.append(time.perf_counter() - t)
    finally:
        client.close()
    return statistics.median(times) * 1e3


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--url", required=True, help="the server's HTTP HOST:PORT")
    p.add_argument("--model", required=True)
    p.add_argument("--calls", type=int, default=3000)
    args = p.parse_args()
    info = fetch_model_info(args.url, args.model, "http")
    arrays = build_arrays(info, 1)
    served = median_rtt_ms(args.url, info, arrays, args.calls)
    with null_endpoint("http", capture_answer(args.url, info, arrays, "http")) as (null_url, _):
        null = median_rtt_ms(null_url, info, arrays, args.calls)
    again = median_rtt_ms(args.url, info, arrays, args.calls)
    print(f"median round trip: served {served:.3f} ms, null endpoint {null:.3f} ms, served again {again:.3f} ms")


if __name__ == "__main__":
    main()
