"""`trainserve export` (the Triton model repository it writes), `serve` and `limits`.

RepositoryOptions' fields are named as Triton's model_config protobuf names them
(`max_batch_size`, `dynamic_batching.max_queue_delay_microseconds`); RepositoryConfig
(serve/repository.py) is RepositoryOptions plus its checks.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from trainserve.core.options.common import RunsDir
from trainserve.core.options.spec import REQUIRED, opt

CPU_VARIANTS = ("fp32", "int8")  # the exported ONNX files a CPU model can serve
GPU_VARIANTS = ("fp32", "fp16")  # ... and a GPU model
SERVE_DEVICES = ("cpu", "cuda")


@dataclass(kw_only=True)
class RepositoryOptions:
    """How the generated `<family>_cpu` and `<family>_gpu` models are batched, placed and threaded."""

    max_batch_size: int = opt(64, "Largest batch Triton's dynamic batcher may form (max_batch_size).",
                              unit="samples")
    preferred_batch_sizes: tuple[int, ...] = opt((), "Preferred batch sizes of the dynamic batcher, comma-separated, "
                                                     "e.g. 16,32,64 (default: max/4, max/2, max).",
                                                 cli_type=str)
    max_queue_delay_microseconds: int = opt(1000, "How long the dynamic batcher may hold a request for a batch to "
                                                  "fill (dynamic_batching.max_queue_delay_microseconds).", unit="µs",
                                            aliases=("--max-queue-delay-us",))
    cpu_instances: int = opt(1, "Instances (onnxruntime sessions) of the CPU model.")
    # two per GPU, so one copies its batch in and out while the other runs; with one the GPU idles during every
    # host-device copy (`git show aa232bf:docs/BENCHMARKS.md`, embedded server on the GPU)
    gpu_instances: int = opt(2, "Instances of the GPU model per GPU (two overlap copies with compute).")
    cpu_threads: int = opt(0, "onnxruntime intra-op threads per CPU instance (0: left to the serving machine, "
                              "cores / instances).")
    tensorrt: bool = opt(False, "Add the TensorRT FP16 accelerator to the GPU model.", flags=("--tensorrt",))
    cpu_variant: str = opt("fp32", "The exported ONNX file <model>_cpu serves.", choices=CPU_VARIANTS)
    gpu_variant: str = opt("fp16", "The exported ONNX file <model>_gpu serves.", choices=GPU_VARIANTS)


@dataclass(kw_only=True)
class ExportJob(RunsDir):
    """`trainserve export`: what to export, and how to check it."""

    run: str = opt(REQUIRED, "Run name: reads runs/RUN/train/, writes runs/RUN/export/ and runs/RUN/model_repository/.")
    checkpoint: Path | None = opt(None, "Export this checkpoint.pt instead of the run's.")
    card: Path | None = opt(None, "Model card (model.json) of --checkpoint.")
    opset: int | None = opt(None, "ONNX opset (default: the exporter's).")
    eval_samples: int = opt(1024, "Evaluation samples for the accuracy of each variant.", unit="samples")
    seed: int | None = opt(None, "Seed of the random verification inputs (default: fresh).")
    onnx: Path | None = opt(None, "A model trained elsewhere: serve this ONNX file (fp32, batch dimension dynamic) "
                                  "instead of exporting the run's checkpoint; its card is read from the graph.")


@dataclass(kw_only=True)
class ServeOptions:
    """`trainserve serve`: what the embedded server serves, where it listens, and its limits."""

    model_repository: Path = opt(REQUIRED, "Triton-layout model repository: <model>/{config.pbtxt, "
                                           "<version>/model.onnx}.")
    device: str = opt("cpu", "cuda: the CUDA execution provider (refuses to start on a CPU fallback).",
                      choices=SERVE_DEVICES)
    host: str = opt("127.0.0.1", "Address to bind; 0.0.0.0 exposes the server beyond this machine.")
    http_port: int = opt(8000, "HTTP/REST port; 0 = any free port, -1 = off.")
    grpc_port: int = opt(8001, "gRPC port; 0 = any free port, -1 = off.")
    metrics_port: int = opt(8002, "Prometheus metrics port; 0 = any free port, -1 = off.")
    threads: int = opt(0, "onnxruntime intra-op threads per session when config.pbtxt does not say "
                          "(intra_op_thread_count); 0 = the cores divided by the instance count.")
    max_queue_size: int = opt(1024, "Requests waiting per model before the server answers 503 / UNAVAILABLE.",
                              unit="requests")
    max_body_bytes: int = opt(64 * 1024 * 1024, "Largest request body accepted (413 beyond).", unit="bytes")
    body_timeout_s: float = opt(30.0, "An HTTP request head or body not fully received this many seconds after it "
                                      "began is answered 408 and its connection closed; a gRPC ModelInfer message, "
                                      "DEADLINE_EXCEEDED; a gRPC reply that waited this long for the client's "
                                      "flow-control window, its stream reset.", unit="s")
    max_connections: int = opt(1024, "Open HTTP connections at most; a connection beyond it is answered 503 and "
                                     "closed at once. gRPC: client connections with calls in flight at most; a call "
                                     "from one more is answered UNAVAILABLE.")
    max_queue_bytes: int = opt(256 << 20, "Input bytes waiting per model before the server answers 503 / "
                                          "UNAVAILABLE.", unit="bytes")
    queue_timeout_s: float = opt(10.0, "A request still queued after this many seconds is answered 503 / "
                                       "UNAVAILABLE 'Request timeout expired' (0 = never; config.pbtxt's "
                                       "default_queue_policy overrides it per model).", unit="s")
    spin: bool = opt(False, "Let onnxruntime's idle threads busy-wait: lower latency at low load on cores nobody "
                            "else needs, fewer requests/s when the event loop shares them (docs/BENCHMARKS.md).",
                     flags=("--spin/--no-spin",))
    busy_poll_us: int = opt(1000, "After a request shorter than this, or one that left its model idle, poll the "
                                  "sockets for this many microseconds instead of sleeping (while no batch runs): "
                                  "lower latency at low load for some CPU time; 0 = off.", unit="µs")
    frontends: int = opt(0, "Processes that parse HTTP and gRPC on the same ports, in front of one model process "
                            "that batches for all of them; 0 = 1 for --device cpu, else from the cores (1 below 8, "
                            "else a quarter of them, at most 8); 1 = everything in one process.")


@dataclass(kw_only=True)
class LimitsJob(RunsDir):
    """`trainserve limits`: onnxruntime in process on one device, the bound for the served figures."""

    run: str = opt(REQUIRED, "Run name: reads runs/RUN/model_repository/, writes runs/RUN/limits/.")
    device: str = opt("cpu", "cpu: the <model>_cpu models; cuda: the <model>_gpu models (fails without "
                             "onnxruntime's CUDA provider).", choices=SERVE_DEVICES)
    budget_s: float = opt(10.0, "Seconds for the whole device, session builds included; points are cut short to "
                                "fit.", unit="s")
    model: str | None = opt(None, "Served model name (default: every model of the device), e.g. cnn_cpu.")
    points: str = opt("all", "all: thread counts, every power-of-two batch and spinning; served: only the points "
                             "served figures are set beside (batch 1 and the largest batch at the server's threads "
                             "and instances), each given more of the budget.", choices=("all", "served"))
    working_set_batch: int | None = opt(None, "Also measure the model's working set at this batch (e.g. the "
                                              "training batch, to set inference's memory beside training's at one "
                                              "batch); its ONNX batch dimension may exceed max_batch_size.",
                                        unit="samples")
