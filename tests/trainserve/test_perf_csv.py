"""The report's perf_analyzer CSVs: perf_analyzer's own -f column names, one row per served operating point,
times in microseconds, and empty cells (not zeros) where trainserve did not measure a figure."""

from __future__ import annotations

import csv

from tests.trainserve.test_cost import make_run
from trainserve.core.profile import LatencyStats, ProfileRecord
from trainserve.loadtest.histogram import Histogram
from trainserve.report import build_report
from trainserve.report.serving.perf_csv import to_csv

# perf_analyzer's header, as its documentation prints it after `perf_analyzer ... -f perf.csv`
PERF_ANALYZER_HEADER = ("Concurrency,Inferences/Second,Client Send,Network+Server Send/Recv,Server Queue,"
                        "Server Compute Input,Server Compute Infer,Server Compute Output,Client Recv,"
                        "p50 latency,p90 latency,p95 latency,p99 latency")


def test_a_report_writes_one_csv_per_load_record_with_perf_analyzers_columns(tmp_path):
    run = make_run(tmp_path)
    build_report(run)
    folder = run / "report" / "perf_analyzer"
    files = sorted(p.name for p in folder.iterdir())
    assert files == ["cpu-batch1.csv", "cpu-ramp.csv", "gpu-batch1.csv", "gpu-ramp.csv", "gpu-sat.csv"]
    for f in folder.iterdir():
        assert f.read_text().splitlines()[0] == PERF_ANALYZER_HEADER
    ramp = list(csv.DictReader((folder / "cpu-ramp.csv").open()))
    # one row per step: users, inferences/s, latencies in µs (the ramp steps of make_run: p50 = p99 / 2)
    assert [(r["Concurrency"], r["Inferences/Second"], r["p99 latency"], r["p50 latency"]) for r in ramp] == [
        ("1", "100.0", "5000", "2500"), ("2", "180.0", "8000", "4000"), ("3", "240.0", "15000", "7500"),
        ("4", "250.0", "40000", "20000")]
    assert ramp[0]["Client Send"] == "" and ramp[0]["Server Queue"] == ""  # not measured: empty, not 0


def test_server_times_and_p95_of_a_plain_record():
    r = ProfileRecord(phase="infer", model="m_gpu", backend="triton", device="cuda", batch_size=1, concurrency=4)
    r.speed.throughput_samples_s = 400.0
    r.speed.latency = LatencyStats(count=100, p50_ms=1.5, p90_ms=2.0, p99_ms=3.25)
    h = Histogram()
    for ms in range(1, 101):  # 1..100 ms: nearest-rank p95 is 95 ms
        h.record(float(ms) / 100)
    r.extra = {"latency_histogram": h.to_dict(),
               "server": {"metrics": {"nv_inference_request_success": 100, "nv_inference_request_duration_us": 90_000,
                                      "nv_inference_queue_duration_us": 20_000,
                                      "nv_inference_compute_input_duration_us": 5_000,
                                      "nv_inference_compute_infer_duration_us": 50_000,
                                      "nv_inference_compute_output_duration_us": 1_000}}}
    (row,) = list(csv.DictReader(to_csv(r).splitlines()))
    assert row["Concurrency"] == "4" and row["Inferences/Second"] == "400.0"
    assert (row["Server Queue"], row["Server Compute Input"], row["Server Compute Infer"],
            row["Server Compute Output"]) == ("200", "50", "500", "10")
    assert row["Network+Server Send/Recv"] == "140"  # 900 µs per request minus queue and compute
    assert (row["p50 latency"], row["p90 latency"], row["p95 latency"], row["p99 latency"]) == (
        "1500", "2000", "950", "3250")


def test_open_loop_record_is_keyed_by_request_rate():
    r = ProfileRecord(phase="infer", model="m_cpu", backend="onnxruntime", device="cpu", batch_size=1)
    r.speed.throughput_samples_s = 50.0
    r.settings = {"rate": 50.0}
    assert to_csv(r).splitlines()[0].startswith("Request Rate,Inferences/Second,")
