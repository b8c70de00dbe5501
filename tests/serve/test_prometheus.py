"""The /metrics page: Triton's names, types and labels, served for real on an ephemeral port."""

from __future__ import annotations

import asyncio
import re
import sys
import urllib.request

import pytest

from trainserve.serve.protocol.prometheus import METRIC_NAMES, GpuGauges, MetricsServer, ResourceReader, Resources, render

_SAMPLE = re.compile(r'^(?P<name>[a-z_]+)(?P<labels>\{[^}]*\})? (?P<value>-?[0-9.e+-]+)$')


def parse(text: str) -> tuple[dict[str, str], dict[tuple[str, str], float]]:
    """Prometheus text -> ({name: type}, {(name, labels): value}); every line must be well formed."""
    types: dict[str, str] = {}
    samples: dict[tuple[str, str], float] = {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ")
            types[name] = kind
        elif line.startswith("# HELP "):
            continue
        else:
            m = _SAMPLE.match(line)
            assert m, f"malformed sample line: {line!r}"
            samples[(m["name"], m["labels"] or "")] = float(m["value"])
    return types, samples


def stats(success: int = 3, rows: int = 5) -> dict:
    d = lambda count, ns: {"count": count, "ns": ns}  # noqa: E731
    return {"name": "cnn_cpu", "version": "1", "inference_count": rows, "execution_count": 2,
            "inference_stats": {"success": d(success, 9_000_000), "fail": d(1, 50_000), "queue": d(success, 12_345),
                                "compute_input": d(success, 2_000), "compute_infer": d(success, 3_000_999),
                                "compute_output": d(success, 1_000)}}


def test_render_triton_names_types_and_values():
    gpu = GpuGauges(uuid="GPU-abc", utilization=0.25, memory_total_bytes=80 << 30, memory_used_bytes=1 << 30,
                    power_w=120.5, power_limit_w=700.0, energy_j=42.0)
    text = render([stats()], Resources(cpu_utilization=0.5, cpu_memory_total_bytes=1000,
                                       cpu_memory_used_bytes=400, gpus=[gpu]))
    types, samples = parse(text)
    assert set(types) == set(METRIC_NAMES)
    # Triton's counters without `_total` keep their exact sample names as untyped (the module's docstring)
    assert types["nv_inference_request_success"] == "untyped" and types["nv_gpu_utilization"] == "gauge"
    assert types["nv_energy_consumption"] == "untyped" and types["nv_cpu_memory_used_bytes"] == "gauge"
    model = '{model="cnn_cpu",version="1"}'
    assert samples[("nv_inference_request_success", model)] == 3
    assert samples[("nv_inference_request_failure", model)] == 1
    assert samples[("nv_inference_count", model)] == 5
    assert samples[("nv_inference_exec_count", model)] == 2
    assert samples[("nv_inference_request_duration_us", model)] == 9000  # ns -> us
    assert samples[("nv_inference_queue_duration_us", model)] == 12
    assert samples[("nv_inference_compute_infer_duration_us", model)] == 3000
    assert samples[("nv_gpu_utilization", '{gpu_uuid="GPU-abc"}')] == 0.25
    assert samples[("nv_gpu_power_usage", '{gpu_uuid="GPU-abc"}')] == 120.5
    assert samples[("nv_gpu_memory_total_bytes", '{gpu_uuid="GPU-abc"}')] == 80 << 30
    assert samples[("nv_cpu_utilization", "")] == 0.5
    assert samples[("nv_cpu_memory_used_bytes", "")] == 400


def test_refusals_counter_keeps_its_name_and_type_and_the_load_test_reads_the_page():
    from trainserve.loadtest.metrics import parse_prometheus
    from trainserve.serve.protocol import refusals

    r = refusals.Refusals()
    r.add("grpc", "flood", 3)
    text = render([stats()], None, r)
    types, samples = parse(text)
    assert types["trainserve_refused_total"] == "counter"
    assert samples[("trainserve_refused_total", '{frontend="grpc",reason="flood"}')] == 3
    assert samples[("trainserve_refused_total", '{frontend="http",reason="streams"}')] == 0
    read = parse_prometheus(text)
    assert read["nv_inference_request_success"] == [({"model": "cnn_cpu", "version": "1"}, 3.0)]
    assert read["nv_inference_queue_duration_us"] == [({"model": "cnn_cpu", "version": "1"}, 12.0)]


def test_label_values_are_escaped():
    s = stats()
    s["name"] = 'we"ird\\name'
    _, samples = parse(render([s], None))
    assert ("nv_inference_count", '{model="we\\"ird\\\\name",version="1"}') in samples


def test_resource_reader_reads_this_machine():
    reader = ResourceReader()
    try:
        r = reader.read()
    finally:
        reader.close()
    assert 0.0 <= r.cpu_utilization <= 1.0
    assert 0 < r.cpu_memory_used_bytes < r.cpu_memory_total_bytes
    for gpu in r.gpus:  # none on a machine without NVML; real values on one with it
        assert 0.0 <= gpu.utilization <= 1.0 and gpu.memory_total_bytes > 0


def test_metrics_server_serves_live_counters():
    current = [stats(success=1)]

    async def scenario() -> tuple[str, str, str]:
        server = MetricsServer(lambda: current, port=0, resources=ResourceReader())
        await server.start()
        try:
            url = f"http://127.0.0.1:{server.port}/metrics"
            fetch = lambda: urllib.request.urlopen(url, timeout=5)  # noqa: E731
            first = await asyncio.to_thread(fetch)
            content_type = first.headers["Content-Type"]
            body1 = first.read().decode()
            current[0] = stats(success=4)
            body2 = (await asyncio.to_thread(fetch)).read().decode()
            return content_type, body1, body2
        finally:
            await server.stop()

    content_type, body1, body2 = asyncio.run(scenario())
    assert content_type.startswith("text/plain")
    key = ("nv_inference_request_success", '{model="cnn_cpu",version="1"}')
    assert parse(body1)[1][key] == 1 and parse(body2)[1][key] == 4
    assert ("nv_cpu_memory_total_bytes", "") in parse(body2)[1]


def test_metrics_server_reports_a_busy_port():
    async def scenario() -> None:
        first = MetricsServer(lambda: [], port=0)
        await first.start()
        try:
            with pytest.raises(OSError):
                await MetricsServer(lambda: [], port=first.port).start()
        finally:
            await first.stop()

    asyncio.run(scenario())


def test_running_server_counters_increase_after_requests(tmp_path):
    import numpy as np
    import tritonclient.grpc as grpcclient

    from tests.serve.inprocess import running_server
    from tests.serve.tiny_models import make_repository

    repo = make_repository(tmp_path / "repo", classifier_delay_us=0)
    with running_server(repo) as (_, ports):
        url = f"http://127.0.0.1:{ports['metrics']}/metrics"
        scrape = lambda: parse(urllib.request.urlopen(url, timeout=5).read().decode())  # noqa: E731
        types, before = scrape()
        assert set(types) == {*METRIC_NAMES, "trainserve_refused_total"}  # Triton's names, and the refusals
        with grpcclient.InferenceServerClient(f"127.0.0.1:{ports['grpc']}") as client:
            for rows in (1, 2, 3):
                x = np.ones((rows, 4), np.float32)
                client.infer("classifier", [grpcclient.InferInput("input", [rows, 4], "FP32").set_data_from_numpy(x)])
            bad = grpcclient.InferInput("input", [1, 4], "FP64").set_data_from_numpy(np.ones((1, 4)))
            with pytest.raises(Exception):
                client.infer("classifier", [bad])
        _, after = scrape()
    model = '{model="classifier",version="2"}'
    assert after[("nv_inference_request_success", model)] == before[("nv_inference_request_success", model)] + 3
    assert after[("nv_inference_request_failure", model)] == before[("nv_inference_request_failure", model)] + 1
    assert after[("nv_inference_count", model)] == before[("nv_inference_count", model)] + 6
    assert after[("nv_inference_exec_count", model)] >= before[("nv_inference_exec_count", model)] + 1
    assert after[("nv_inference_request_duration_us", model)] > before[("nv_inference_request_duration_us", model)]
    assert after[("nv_inference_compute_infer_duration_us", model)] > before[("nv_inference_compute_infer_duration_us", model)]
    assert 0.0 <= after[("nv_cpu_utilization", "")] <= 1.0
    assert after[("nv_cpu_memory_total_bytes", "")] > 0


def test_resource_reader_gpu_gauges_come_through_telemetrys_nvml_wrapper(monkeypatch):
    from tests.trainserve.test_telemetry import FakeNvml

    class Fake(FakeNvml):
        def nvmlDeviceGetUUID(self, h: object) -> bytes:
            return b"GPU-fake"

        def nvmlDeviceGetPowerManagementLimit(self, h: object) -> int:
            return 700_000  # mW

    fake = Fake()
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    reader = ResourceReader(interval_s=60.0)  # the sampler's first tick may or may not have run: either is served
    try:
        gpu = reader.read().gpus[0]
    finally:
        reader.close()
    assert gpu.uuid == "GPU-fake" and gpu.utilization == 0.3 and gpu.power_w == 200.0 and gpu.power_limit_w == 700.0
    assert gpu.memory_total_bytes == 141 * 2**30 and gpu.memory_used_bytes == 3 * 2**30
    # the counter's growth since the reader opened: the fake adds 50 J a read, the sampler's reads too
    assert gpu.energy_j >= 50.0 and gpu.energy_j % 50 == 0


def test_refusal_warnings_are_one_line_per_interval_with_the_count_since_the_last(monkeypatch, caplog):
    from trainserve.serve.protocol import refusals

    clock = [1000.0]
    monkeypatch.setattr(refusals.time, "monotonic", lambda: clock[0])
    r = refusals.Refusals()
    with caplog.at_level("WARNING", logger=refusals.__name__):
        for _ in range(3):
            r.add("grpc", "flood", warning="ended {n} connection(s)")
        r.add("http", "connections", warning="refused {n} connection(s)")  # its own interval
        clock[0] += refusals.LOG_EVERY_S
        r.add("grpc", "flood", warning="ended {n} connection(s)")
    assert [rec.getMessage() for rec in caplog.records] == [
        "ended 1 connection(s)", "refused 1 connection(s)", "ended 3 connection(s)"]
    assert r.get("grpc", "flood") == 4 and r.get("http", "connections") == 1
