"""`trainserve serve`: the embedded KServe v2 / Triton-protocol server on onnxruntime."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from trainserve.commands.choices import ServeDevice


def serve(
    model_repository: Annotated[
        Path, typer.Option("--model-repository", help="Triton-layout model repository: <model>/{config.pbtxt, <version>/model.onnx}.")
    ],
    device: Annotated[ServeDevice, typer.Option(help=(
        "cuda: the CUDA execution provider (refuses to start on a CPU fallback)."))] = ServeDevice("cpu"),
    host: Annotated[str, typer.Option(help="Address to bind; 0.0.0.0 exposes the server beyond this machine.")] = "127.0.0.1",
    http_port: Annotated[int, typer.Option(help="HTTP/REST port; 0 = any free port, -1 = off.")] = 8000,
    grpc_port: Annotated[int, typer.Option(help="gRPC port; 0 = any free port, -1 = off.")] = 8001,
    metrics_port: Annotated[int, typer.Option(help="Prometheus metrics port; 0 = any free port, -1 = off.")] = 8002,
    threads: Annotated[int, typer.Option(help=(
        "onnxruntime intra-op threads per session when config.pbtxt does not say (intra_op_thread_count); "
        "0 = the cores divided by the instance count."))] = 0,
    max_queue_size: Annotated[int, typer.Option(help="Requests waiting per model before the server answers 503 / UNAVAILABLE.")] = 1024,
    max_body_bytes: Annotated[int, typer.Option(help="Largest request body accepted, in bytes (413 beyond).")] = 64 * 1024 * 1024,
    body_timeout_s: Annotated[float, typer.Option(help=(
        "An HTTP request head or body not fully received this many seconds after it began is answered 408 and "
        "its connection closed; a gRPC ModelInfer message, DEADLINE_EXCEEDED."))] = 30.0,
    max_connections: Annotated[int, typer.Option(help=(
        "Open HTTP connections at most; a connection beyond it is answered 503 and closed at once. gRPC: client "
        "connections with calls in flight at most; a call from one more is answered UNAVAILABLE."))] = 1024,
    max_queue_bytes: Annotated[int, typer.Option(help="Input bytes waiting per model before the server answers 503 / UNAVAILABLE.")] = 256 << 20,
    queue_timeout_s: Annotated[float, typer.Option(help=(
        "A request still queued after this many seconds is answered 503 / UNAVAILABLE 'Request timeout expired' "
        "(0 = never; config.pbtxt's default_queue_policy overrides it per model)."))] = 10.0,
    spin: Annotated[bool, typer.Option("--spin/--no-spin", help=(
        "Let onnxruntime's idle threads busy-wait: lower latency at low load on cores nobody else needs, "
        "fewer requests/s when the event loop shares them (docs/BENCHMARKS.md)."))] = False,
    busy_poll_us: Annotated[int, typer.Option(help=(
        "After a request shorter than this, poll the sockets for this many microseconds instead of sleeping "
        "(while no batch runs): lower latency at low load for some CPU time; 0 = off."))] = 1000,
    frontends: Annotated[int, typer.Option(help=(
        "Processes that parse HTTP and gRPC on the same ports, in front of one model process that batches "
        "for all of them; 0 = from the cores (1 below 8, else a quarter of them, at most 8); "
        "1 = everything in one process."))] = 0,
) -> None:
    """Serve a model repository over KServe v2 HTTP and gRPC with Triton's endpoints, ports and metrics.

    Prints 'trainserve serve: ready http=HOST:PORT grpc=HOST:PORT metrics=HOST:PORT' once serving;
    SIGTERM or Ctrl-C stops taking requests, finishes those in flight and exits 0.
    """
    from trainserve.serve.launch import run_server

    run_server(  # a StartError (a UserError) becomes one sentence and exit 1, as every command's
        model_repository=model_repository, device=device.value, host=host, http_port=http_port, grpc_port=grpc_port,
        metrics_port=metrics_port, threads=threads, max_queue_size=max_queue_size, max_body_bytes=max_body_bytes,
        max_queue_bytes=max_queue_bytes, queue_timeout_s=queue_timeout_s, body_timeout_s=body_timeout_s,
        max_connections=max_connections, spin=spin, busy_poll_us=busy_poll_us, frontends=frontends, on_ready=lambda line: typer.echo(line),
    )
