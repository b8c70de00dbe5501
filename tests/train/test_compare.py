from train.compare import speedup_summary
from trainserve.profile import ProfileRecord


def _rec(device, samples_s, p50):
    r = ProfileRecord(phase="train", model="cnn", backend="torch", device=device, device_name=device.upper(),
                      precision="bf16", batch_size=512, preset="small")
    r.speed.throughput_samples_s, r.speed.latency.p50_ms = samples_s, p50
    return r


def test_speedup_is_gpu_over_cpu():
    s = speedup_summary(_rec("cpu", 250.0, 2048.0), _rec("cuda", 100_000.0, 5.12))
    assert s["speedup_throughput"] == 400.0 and s["speedup_step_p50"] == 400.0
    assert s["cpu"]["device_name"] == "CPU" and s["cuda"]["throughput_samples_s"] == 100_000.0


def test_missing_figures_give_null_not_zero():
    s = speedup_summary(_rec("cpu", None, None), _rec("cuda", 1.0, 1.0))
    assert s["speedup_throughput"] is None and s["speedup_step_p50"] is None
