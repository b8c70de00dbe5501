"""Per-model-version statistics, counted the way Triton's statistics extension counts them.

All durations are nanoseconds (time.perf_counter_ns). Per request: success/fail (whole request
duration in the core), queue (enqueue -> its batch starts), compute_input/infer/output (the
durations of the batch it ran in). Per execution: execution_count, and per batch size (rows) the
compute durations once per batch. inference_count counts rows (samples), like Triton.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field


@dataclass
class Duration:
    """A counter pair: how many, and their summed duration in ns."""

    count: int = 0
    ns: int = 0

    def add(self, ns: int, count: int = 1) -> None:
        self.count += count
        self.ns += ns

    def to_dict(self) -> dict[str, int]:
        return {"count": self.count, "ns": self.ns}


@dataclass
class BatchStats:
    """Compute durations of the executions that ran `batch_size` rows."""

    batch_size: int
    compute_input: Duration = field(default_factory=Duration)
    compute_infer: Duration = field(default_factory=Duration)
    compute_output: Duration = field(default_factory=Duration)


@dataclass
class ModelStats:
    """Counters of one model version. Mutated only on the event loop thread, so no lock is needed."""

    name: str
    version: str
    last_inference_ms: int = 0  # wall-clock ms since the epoch of the last completed request
    inference_count: int = 0  # rows (samples) inferred
    execution_count: int = 0  # session runs
    success: Duration = field(default_factory=Duration)
    fail: Duration = field(default_factory=Duration)
    queue: Duration = field(default_factory=Duration)
    compute_input: Duration = field(default_factory=Duration)
    compute_infer: Duration = field(default_factory=Duration)
    compute_output: Duration = field(default_factory=Duration)
    batches: dict[int, BatchStats] = field(default_factory=dict)

    def record_success(self, request_ns: int, requests: int = 1) -> None:
        """A request that took `request_ns`; `requests` > 1: that many clients' requests a front end merged
        into this one (serve/engine/remote_core.py), each counted with the same duration."""
        self.success.add(request_ns * requests, requests)
        self.last_inference_ms = time.time_ns() // 1_000_000

    def record_failure(self, request_ns: int, requests: int = 1) -> None:
        self.fail.add(request_ns * requests, requests)
        self.last_inference_ms = time.time_ns() // 1_000_000

    def record_execution(
        self, rows: int, requests: int, queue_ns_total: int, input_ns: int, infer_ns: int, output_ns: int
    ) -> None:
        """One session run of `rows` rows gathered from `requests` requests (clients' requests: a merged
        one counts as many as it holds); `queue_ns_total` sums their queue times."""
        self.execution_count += 1
        self.inference_count += rows
        self.queue.add(queue_ns_total, requests)
        self.compute_input.add(input_ns * requests, requests)
        self.compute_infer.add(infer_ns * requests, requests)
        self.compute_output.add(output_ns * requests, requests)
        b = self.batches.get(rows)
        if b is None:
            b = self.batches[rows] = BatchStats(rows)
        b.compute_input.add(input_ns)
        b.compute_infer.add(infer_ns)
        b.compute_output.add(output_ns)

    def to_dict(self) -> dict:
        """Triton's ModelStatistics in its JSON form (what GET /v2/models/{m}/stats lists under model_stats)."""
        zero = {"count": 0, "ns": 0}
        return {
            "name": self.name,
            "version": self.version,
            "last_inference": self.last_inference_ms,
            "inference_count": self.inference_count,
            "execution_count": self.execution_count,
            "inference_stats": {
                "success": self.success.to_dict(),
                "fail": self.fail.to_dict(),
                "queue": self.queue.to_dict(),
                "compute_input": self.compute_input.to_dict(),
                "compute_infer": self.compute_infer.to_dict(),
                "compute_output": self.compute_output.to_dict(),
                "cache_hit": dict(zero),
                "cache_miss": dict(zero),
            },
            "batch_stats": [
                {
                    "batch_size": b.batch_size,
                    "compute_input": b.compute_input.to_dict(),
                    "compute_infer": b.compute_infer.to_dict(),
                    "compute_output": b.compute_output.to_dict(),
                }
                for b in sorted(self.batches.values(), key=lambda b: b.batch_size)
            ],
            "memory_usage": [],
        }
