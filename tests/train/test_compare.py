"""The CPU-vs-GPU training speedup `trainserve compare` prints: the report's own computation."""

from trainserve.core.profile import ProfileRecord
from trainserve.report.analysis import speedups_of_records


def _rec(device, samples_s, batch=512, precision="fp32", sweep=False):
    r = ProfileRecord(phase="train", model="cnn", backend="torch", device=device, device_name=device.upper(),
                      precision=precision, batch_size=batch, preset="small")
    r.speed.throughput_samples_s = samples_s
    if sweep:
        r.extra["sweep"] = True
    return r


def test_fixed_point_compare_is_same_config_gpu_over_cpu():
    s = speedups_of_records([("compare/profile-cpu.json", _rec("cpu", 250.0)),
                             ("compare/profile-cuda.json", _rec("cuda", 100_000.0))])
    assert s["train"]["basis"] == "same_config" and s["train"]["value"] == 400.0
    assert s["train"]["cpu_point"]["batch_size"] == 512 and s["train"]["gpu_point"]["precision"] == "fp32"
    assert s["train_best"]["value"] is None  # no sweep: no best points


def test_missing_figures_give_null_not_zero():
    s = speedups_of_records([("compare/profile-cpu.json", _rec("cpu", None)),
                             ("compare/profile-cuda.json", _rec("cuda", 1.0))])
    assert s["train"]["value"] is None and s["train"]["note"]


def test_different_configurations_are_not_called_the_same():
    s = speedups_of_records([("train/a.json", _rec("cpu", 250.0, precision="fp32")),
                             ("train/b.json", _rec("cuda", 9000.0, precision="bf16"))])
    assert s["train"]["value"] is None and "bf16" in s["train"]["note"]


def test_sweeps_give_both_bases():
    recs = [(f"sweep/cpu/fp32-b{b}.json", _rec("cpu", x, b, sweep=True)) for b, x in ((32, 100.0), (64, 150.0))]
    recs += [(f"sweep/cuda/{p}-b{b}.json", _rec("cuda", x, b, p, sweep=True))
             for p, b, x in (("fp32", 64, 3000.0), ("fp32", 128, 5000.0), ("bf16", 128, 9000.0))]
    s = speedups_of_records(recs)
    assert s["train"]["value"] == 20.0 and s["train"]["gpu_point"]["batch_size"] == 64  # the CPU's best config
    assert s["train_best"]["value"] == 60.0 and s["train_best"]["gpu_point"]["precision"] == "bf16"
