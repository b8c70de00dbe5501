"""`trainserve run`'s orchestration against stand-in stages: order, files, failures, interrupts."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from tests.docpaths import assert_documented_artifacts
from tests.conftest import REPO_ROOT, subprocess_env
from trainserve.core.errors import UserError
from trainserve.core.profile import ProfileRecord
from trainserve.pipeline import SCENARIOS, Pipeline, RunConfig

FAKE = Path(__file__).with_name("fake_stages.py")


def fake_argv(*args: str) -> list[str]:
    return [sys.executable, str(FAKE), *args]


def test_pipeline_runs_every_stage_and_writes_the_report(tmp_path):
    events = []
    before = {p.pid for p in psutil.Process().children(recursive=True)}  # other tests' servers
    cfg = RunConfig(device="cpu", quick=True, run="p1", runs_dir=tmp_path)
    html = Pipeline(cfg, progress=events.append, argv=fake_argv).run()
    done = [e.stage for e in events if e.status == "done"]
    assert done == ["train", "sweep-cpu", "export", "frontier-cpu", "limits-cpu", "serve-cpu", "load-cpu-ramp",
                    "load-cpu-server", "load-cpu-batch1", "load-cpu-saturated", "load-cpu-server-nobatch",
                    "load-cpu-shared-rate", "load-cpu-shared-rate-nobatch", "report"]
    # one progress line per sweep point, while the stage runs
    assert [e.detail for e in events if e.status == "line"] == [f"cpu fp32 batch {b}" for b in (8, 16, 32)]
    assert "--sweep-budget-s 25" in (tmp_path / "p1" / "logs" / "sweep-cpu.log").read_text()
    assert_documented_artifacts("run", tmp_path / "p1")
    load = tmp_path / "p1" / "load"
    assert sorted(p.name for p in load.iterdir()) == [
        "embedded-cpu-batch1.json", "embedded-cpu-batch1_stats.csv", "embedded-cpu-ramp.json",
        "embedded-cpu-ramp_stats.csv", "embedded-cpu-saturated.json", "embedded-cpu-saturated_stats.csv",
        "embedded-cpu-server-nobatch.json", "embedded-cpu-server-nobatch_stats.csv", "embedded-cpu-server.json",
        "embedded-cpu-server_stats.csv", "embedded-cpu-shared-rate-nobatch.json",
        "embedded-cpu-shared-rate-nobatch_stats.csv", "embedded-cpu-shared-rate.json",
        "embedded-cpu-shared-rate_stats.csv"]
    # both variants at one open-loop rate, 80% of the lower Server capacity (1,200 each), briefly on a quick run
    for name in ("shared-rate", "shared-rate-nobatch"):
        log = (tmp_path / "p1" / "logs" / f"load-cpu-{name}.log").read_text()
        assert "--rate 960 " in log and "--duration 3s" in log and "--search" not in log
    assert "--model cnn_cpu_nobatch" in (tmp_path / "p1" / "logs" / "load-cpu-shared-rate-nobatch.log").read_text()
    # the same Server scenario with batching off, on the model exported beside it, from the capacity found with it on
    nobatch_log = (tmp_path / "p1" / "logs" / "load-cpu-server-nobatch.log").read_text()
    assert "--model cnn_cpu_nobatch" in nobatch_log and "--search" in nobatch_log and "--rate 600.0" in nobatch_log  # half of 1,200
    # the Server scenario starts at 80% of the ramp's best, with the run's SLO, and feeds the cost section
    server_log = (tmp_path / "p1" / "logs" / "load-cpu-server.log").read_text()
    assert "--search" in server_log and "--rate 2560.0" in server_log and "--slo-p99-ms 100" in server_log
    assert "--processes 1 " in server_log  # a CPU server keeps its cores; on a GPU `load` picks the processes
    assert "--warmup-s 0.5 --window-s 0.5" in (tmp_path / "p1" / "logs" / "load-cpu-batch1.log").read_text()
    summary = json.loads((html.parent / "summary.json").read_text())
    assert summary["verdict"]["result"] == "VALID", summary["verdict"]
    rows = summary["scenarios"]["models"]["cnn"]["cpu"]
    assert rows["Server"]["capacity_req_s"] == 1200.0 and rows["SingleStream"]["source"].endswith("batch1.json")
    slo_row = next(r for r in summary["costs"]["models"]["cnn"]["infer"]["cpu"]["rows"] if r["basis"] == "slo")
    assert (slo_row["kind"], slo_row["requests_s"]) == ("Server scenario", 1200.0)
    cpu = summary["models"]["cnn"]["infer"]["onnxruntime"]["cpu"]
    assert cpu["batch1"]["source"] == "load/embedded-cpu-batch1.json"  # not a shared-rate load, though batch 1
    shared = summary["models"]["cnn"]["batching"]["cpu"]["shared_rate"]
    assert (shared["rate_req_s"], shared["on_p99_ms"] < shared["off_p99_ms"]) == (960.0, True)
    assert shared["off_source"] == "load/embedded-cpu-shared-rate-nobatch.json"
    assert cpu["saturated"]["batch_size"] == 64
    assert summary["models"]["cnn"]["ramps"][0]["source"] == "load/embedded-cpu-ramp.json"
    # the in-process limits ran before the server, within --quick's budget, and are set beside the served figures
    # inference's working set probed at the batch of the training column it stands beside
    assert "--budget-s 4 --points served --working-set-batch 64 " in \
        (tmp_path / "p1" / "logs" / "limits-cpu.log").read_text()
    assert summary["models"]["cnn"]["limits"]["cpu"]["best_batch"] == 64
    assert set(summary["models"]["cnn"]["server_vs_limit"]["cpu"]) == {"batch1_overhead_ms", "saturated_efficiency"}
    # each load stage is given the server's pid, to sample its process itself (its record has one writer:
    # tests/loadtest/test_runner.py checks the sample), and the pipeline leaves the record as the stage wrote it
    pids = {re.search(r"--server-pid (\d+)", (tmp_path / "p1" / "logs" / f"load-cpu-{s}.log").read_text()).group(1)
            for s in SCENARIOS}
    assert len(pids) == 1
    record = ProfileRecord.load(load / "embedded-cpu-batch1.json")
    assert record.served.server_process.pid == int(pids.pop()) and record.memory.rss_peak_bytes is None
    assert (tmp_path / "p1" / "logs" / "serve-cpu.log").read_text().count("trainserve serve: ready") == 1
    # the server was stopped when its loads were done
    assert not [p for p in psutil.Process().children(recursive=True)
                if p.pid not in before and _alive(p)]


def test_with_a_gpu_it_compares_training_and_serves_on_both(tmp_path, monkeypatch):
    import trainserve.pipeline as pipeline

    monkeypatch.setattr(pipeline, "_cuda_available", lambda: True)
    events = []
    cfg = RunConfig(quick=False, run="g1", runs_dir=tmp_path)
    html = Pipeline(cfg, progress=events.append, argv=fake_argv).run()
    starts = {e.stage: e.detail for e in events if e.status == "start"}
    assert list(starts)[:8] == ["train", "sweep-cpu", "sweep-cuda", "export", "frontier-cpu", "frontier-cuda",
                                "limits-cpu", "serve-cpu"]
    assert starts["train"] == "cnn/small on the GPU"
    assert starts["sweep-cpu"] == "cnn/small on the CPU, 60 s budget"  # the trained model's size on both
    assert "serve-cuda" in starts and starts["load-cuda-batch1"] == "batch1 on cnn_gpu"
    assert list(starts).index("limits-cuda") == list(starts).index("serve-cuda") - 1
    assert "--device cuda --model cnn_gpu --budget-s 15" in (tmp_path / "g1" / "logs" / "limits-cuda.log").read_text()
    train_log = (tmp_path / "g1" / "logs" / "train.log").read_text()
    assert "--device cuda --precision bf16 --find-max-batch" in train_log and "--samples 32768" in train_log
    assert (tmp_path / "g1" / "load" / "embedded-cuda-saturated.json").is_file()
    sp = json.loads((html.parent / "summary.json").read_text())["models"]["cnn"]["speedups"]
    assert (sp["train"]["basis"], sp["train"]["value"]) == ("same_config", 100.0)  # batch 32, fp32 on both
    assert (sp["train_best"]["basis"], sp["train_best"]["value"]) == ("best_vs_best", 100.0)


def test_no_sweep_keeps_the_fixed_point_compare(tmp_path, monkeypatch):
    import trainserve.pipeline as pipeline

    monkeypatch.setattr(pipeline, "_cuda_available", lambda: True)
    events = []
    html = Pipeline(RunConfig(quick=True, run="g3", runs_dir=tmp_path, sweep=False), progress=events.append,
                    argv=fake_argv).run()
    starts = [e.stage for e in events if e.status == "start"]
    assert starts[:3] == ["train", "compare", "export"] and not any(s.startswith("sweep") for s in starts)
    assert not (tmp_path / "g3" / "sweep").exists()
    summary = json.loads((html.parent / "summary.json").read_text())
    m = summary["models"]["cnn"]
    assert m["operating_points"] == {}
    assert m["speedups"]["train"]["basis"] == "same_config" and m["speedups"]["train"]["value"] == 200.0
    assert m["speedups"]["train_best"]["value"] is None


def test_a_bad_sweep_budget_is_one_sentence():
    for bad in (0, -5):
        with pytest.raises(UserError, match=rf"^--sweep-budget-s {bad} is invalid; give the seconds"):
            RunConfig(sweep_budget_s=bad)


def test_cuda_without_a_gpu_is_a_user_error(tmp_path, monkeypatch):
    import trainserve.pipeline as pipeline

    monkeypatch.setattr(pipeline, "_cuda_available", lambda: False)
    with pytest.raises(UserError, match="--device cuda was given but no CUDA GPU"):
        Pipeline(RunConfig(device="cuda", run="g2", runs_dir=tmp_path), argv=fake_argv).run()
    assert not (tmp_path / "g2").exists()


def test_a_failing_stage_names_itself_and_its_log(tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_FAIL", "export")
    cfg = RunConfig(device="cpu", quick=True, run="p2", runs_dir=tmp_path)
    with pytest.raises(UserError) as err:
        Pipeline(cfg, argv=fake_argv).run()
    msg = str(err.value)
    assert msg.startswith("the export stage failed: exited with code 1")
    assert "fake export broke on purpose" in msg
    assert msg.endswith(f"see its log at {tmp_path / 'p2' / 'logs' / 'export.log'}")


def test_bad_options_are_user_errors():
    with pytest.raises(UserError, match="--model 'resnet' is invalid"):
        RunConfig(model="resnet")
    with pytest.raises(UserError, match="--device 'tpu' is invalid"):
        RunConfig(device="tpu")
    assert RunConfig().run.startswith("run-")


SCRIPT = textwrap.dedent("""
    import sys
    sys.path.insert(0, {tests!r})
    from pathlib import Path
    from trainserve.pipeline import Pipeline, RunConfig
    from fake_stages_argv import fake_argv
    Pipeline(RunConfig(device="cpu", quick=True, run="p3", runs_dir=Path({runs!r})), argv=fake_argv).run()
""")


@pytest.mark.parametrize("slow", ["serve-child", "load"])
def test_sigint_mid_run_leaves_no_process_behind(tmp_path, slow):
    (tmp_path / "fake_stages_argv.py").write_text(
        f"import sys\ndef fake_argv(*a):\n    return [sys.executable, {str(FAKE)!r}, *a]\n")
    script = SCRIPT.format(tests=str(tmp_path), runs=str(tmp_path / "runs"))
    # serve-child: the server starts a grandchild; load: the first load hangs with a grandchild
    proc = subprocess.Popen([sys.executable, "-c", script], cwd=REPO_ROOT, env=subprocess_env(FAKE_SLOW=slow),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        descendants = _wait_for_descendants(proc.pid, minimum=3 if slow == "load" else 2)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode != 0 and b"KeyboardInterrupt" in err
    time.sleep(0.2)
    alive = [p for p in descendants if _alive(p)]
    assert not alive, f"still running after SIGINT: {[p.cmdline() for p in alive]}"


def _wait_for_descendants(pid: int, minimum: int, timeout_s: float = 30) -> list[psutil.Process]:
    deadline = time.monotonic() + timeout_s
    parent = psutil.Process(pid)
    while time.monotonic() < deadline:
        kids = parent.children(recursive=True)
        if len([k for k in kids if "sleep(600)" in " ".join(_cmdline(k))]) >= 1 and len(kids) >= minimum:
            return kids
        time.sleep(0.05)
    raise AssertionError(f"the run never reached the hanging stage: {[_cmdline(k) for k in parent.children(True)]}")


def _cmdline(p: psutil.Process) -> list[str]:
    try:
        return p.cmdline()
    except psutil.Error:
        return []


def _alive(p: psutil.Process) -> bool:
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_an_existing_run_is_refused_before_any_stage(tmp_path):
    from trainserve.core.errors import UserError

    ckpt = tmp_path / "done" / "train" / "checkpoint.pt"
    ckpt.parent.mkdir(parents=True)
    ckpt.write_bytes(b"a finished run's checkpoint")
    with pytest.raises(UserError, match="run 'done' already exists"):
        Pipeline(RunConfig(device="cpu", quick=True, run="done", runs_dir=tmp_path))
    assert ckpt.read_bytes() == b"a finished run's checkpoint" and sorted(p.name for p in (tmp_path / "done").iterdir()) == ["train"]


def test_a_target_accuracy_trains_both_devices_to_it(tmp_path, monkeypatch):
    import trainserve.pipeline as pipeline

    monkeypatch.setattr(pipeline, "_cuda_available", lambda: True)
    commands: dict[str, list[str]] = {}

    def recording_argv(*args: str) -> list[str]:
        commands.setdefault(args[0], list(args))
        return fake_argv(*args)

    events = []
    Pipeline(RunConfig(quick=True, run="g4", runs_dir=tmp_path, dataset="digits", target_accuracy=0.9),
             progress=events.append, argv=recording_argv).run()
    starts = [e.stage for e in events if e.status == "start"]
    assert "compare" in starts and any(s.startswith("sweep") for s in starts)  # the sweep stays; compare is added
    for stage in ("train", "compare"):
        cmd = commands[stage]
        assert cmd[cmd.index("--target-accuracy") + 1] == "0.9" and cmd[cmd.index("--dataset") + 1] == "digits"
        assert cmd[cmd.index("--epochs") + 1] == str(pipeline.QUICK.accuracy_epochs)
    assert "--no-sweep" in commands["compare"] and "--steps" not in commands["compare"]


def test_a_bad_target_accuracy_is_one_sentence():
    for bad in (0, 1.5, -0.2):
        with pytest.raises(UserError, match=rf"^--target-accuracy {bad:g} is invalid; give a held-out accuracy"):
            RunConfig(target_accuracy=bad)


def test_resume_keeps_the_completed_stages_and_runs_the_rest(tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_FAIL", "export")
    cfg = dict(device="cpu", quick=True, run="r1", runs_dir=tmp_path)
    with pytest.raises(UserError, match="the export stage failed"):
        Pipeline(RunConfig(**cfg), argv=fake_argv).run()
    run = tmp_path / "r1"
    assert set(json.loads((run / "stages.json").read_text())) == {"train", "sweep-cpu"}
    train_log = (run / "logs" / "train.log").read_text()
    # without --resume an existing run is refused, so nothing of it is overwritten by accident
    with pytest.raises(UserError, match=r"^run 'r1' already exists at .*--resume to finish it"):
        Pipeline(RunConfig(**cfg), argv=fake_argv)
    monkeypatch.delenv("FAKE_FAIL")
    events = []
    html = Pipeline(RunConfig(**cfg, resume=True), progress=events.append, argv=fake_argv).run()
    kept = [e.stage for e in events if e.status == "done" and "kept from the earlier attempt" in e.detail]
    assert kept == ["train", "sweep-cpu"]
    ran = [e.stage for e in events if e.status == "done" and e.stage not in kept]
    assert ran == ["export", "frontier-cpu", "limits-cpu", "serve-cpu", "load-cpu-ramp", "load-cpu-server",
                   "load-cpu-batch1", "load-cpu-saturated", "load-cpu-server-nobatch", "load-cpu-shared-rate",
                   "load-cpu-shared-rate-nobatch", "report"]
    assert (run / "logs" / "train.log").read_text() == train_log  # not run again
    assert html.is_file() and len(json.loads((run / "stages.json").read_text())) == 12

    # a run whose every load is done starts no server when resumed
    events.clear()
    Pipeline(RunConfig(**cfg, resume=True), progress=events.append, argv=fake_argv).run()
    assert [e.stage for e in events if e.status == "done" and "kept" not in e.detail] == ["report"]


def test_resume_refuses_other_options_and_a_run_that_never_started(tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_FAIL", "train")
    with pytest.raises(UserError):
        Pipeline(RunConfig(device="cpu", quick=True, run="r2", runs_dir=tmp_path), argv=fake_argv).run()
    with pytest.raises(UserError, match=r"^--resume: run 'r2' was started with --repeats 1, not 3; resume it with"):
        Pipeline(RunConfig(device="cpu", quick=True, run="r2", runs_dir=tmp_path, repeats=3, resume=True),
                 argv=fake_argv)
    with pytest.raises(UserError, match=r"^--resume: run 'r9' cannot be resumed, its run.json at .* is missing"):
        Pipeline(RunConfig(device="cpu", quick=True, run="r9", runs_dir=tmp_path, resume=True), argv=fake_argv)


def test_the_shared_rate_is_a_share_of_the_lower_capacity_or_says_why_not(tmp_path):
    from trainserve.core.profile import ProfileRecord

    pipeline = Pipeline(RunConfig(device="cpu", quick=True, run="s1", runs_dir=tmp_path), argv=fake_argv)
    assert pipeline._shared_rate("cpu") == "the Server search as exported wrote no record"
    for name, capacity in (("server", 2000.0), ("server-nobatch", None)):
        r = ProfileRecord(phase="infer", model="cnn_cpu", backend="onnxruntime", device="cpu", batch_size=1)
        r.extra["search"] = {"capacity_req_s": capacity}
        r.save(tmp_path / "s1" / "load" / f"embedded-cpu-{name}.json")
    assert "with batching off found no rate within the SLO" in pipeline._shared_rate("cpu")
    r.extra["search"] = {"capacity_req_s": 4000.0}  # batching off carries more here: the lower one decides
    r.save(tmp_path / "s1" / "load" / "embedded-cpu-server-nobatch.json")
    assert pipeline._shared_rate("cpu") == 1600.0


def test_a_gpu_servers_search_in_the_full_run_starts_from_its_own_closed_loop_estimate(tmp_path):
    # the ramp's few closed-loop users put its best far below a GPU's capacity; doubling from 80% of it spent
    # the run's 40 s before the bracket closed ("at least"), so the GPU's search estimates its first rate
    full = Pipeline(RunConfig(device="cpu", run="g1", runs_dir=tmp_path), argv=fake_argv)
    gpu = " ".join(full._server_args("cuda", []))
    assert "--rate" not in gpu and "--duration 60s" in gpu and "--search" in gpu
    cpu = " ".join(full._server_args("cpu", []))
    assert "--rate 100.0" in cpu and "--duration 40s" in cpu  # no ramp record: the given first rate
    nobatch = " ".join(full._server_args("cuda", [], nobatch=True))
    assert "--rate" in nobatch and "--duration 40s" in nobatch  # from the batching search's capacity
    quick = Pipeline(RunConfig(device="cpu", quick=True, run="g2", runs_dir=tmp_path), argv=fake_argv)
    assert "--rate" in " ".join(quick._server_args("cuda", []))  # the quick run's 10 s hold no estimate
