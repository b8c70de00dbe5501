from trainserve.loadtest.metrics import MetricsScraper, parse_prometheus

TEXT = """# HELP nv_gpu_utilization GPU utilization rate [0.0 - 1.0)
# TYPE nv_gpu_utilization gauge
nv_gpu_utilization{{gpu_uuid="GPU-a"}} {util}
nv_gpu_utilization{{gpu_uuid="GPU-b"}} {util}
nv_gpu_power_usage{{gpu_uuid="GPU-a"}} 100
nv_energy_consumption{{gpu_uuid="GPU-a"}} {energy}
nv_cpu_utilization 0.5
nv_inference_request_success{{model="m",version="1"}} {n}
nv_inference_request_success{{model="other",version="1"}} 999
nv_inference_count{{model="m",version="1"}} {rows}
nv_inference_exec_count{{model="m",version="1"}} {n}
nv_inference_queue_duration_us{{model="m",version="1"}} {queue}
"""


def test_parse_labels_values_and_timestamps() -> None:
    m = parse_prometheus('a{x="1,2",y="z"} 3.5 1700000000\nb 7\n# c 1\n')
    assert m == {"a": [({"x": "1,2", "y": "z"}, 3.5)], "b": [({}, 7.0)]}


def test_summary_gauges_and_counter_deltas_per_model() -> None:
    s = MetricsScraper("http://unused", "m")
    s.scrapes = [(0.0, parse_prometheus(TEXT.format(util=0.2, energy=1000, n=10, rows=40, queue=100))),
                 (2.0, parse_prometheus(TEXT.format(util=0.6, energy=1500, n=110, rows=440, queue=2100)))]
    out = s.summary()
    assert out["nv_gpu_utilization"]["mean"] == 0.4 and out["nv_gpu_utilization"]["max"] == 0.6
    assert out["nv_energy_consumption"] == 500.0
    assert out["nv_inference_request_success"] == 100.0  # the other model's counter is left out
    assert out["nv_inference_queue_mean_us"] == 20.0
    assert out["mean_server_batch"] == 4.0
    assert out["nv_cpu_utilization"]["mean"] == 0.5


def test_unreachable_metrics_are_reported_not_raised() -> None:
    s = MetricsScraper("http://127.0.0.1:9/metrics", "m", timeout_s=0.5)
    assert s.scrape_once() is False
    assert s.summary()["scrapes"] == 0 and s.error
