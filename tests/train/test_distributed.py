"""trainserve.train.distributed and train.launch: unit checks in process, then real 2-process gloo runs."""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import time

import psutil
import pytest
import torch

from tests.conftest import subprocess_env, trainserve_cmd
from trainserve.train import distributed, launch
from trainserve.train.distributed import DistContext
from trainserve.core.errors import UserError

# --- in process -----------------------------------------------------------------------------------


def test_read_env_validates():
    assert distributed.read_env({"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1"}) == (1, 2, 1)
    with pytest.raises(UserError, match="inconsistent"):
        distributed.read_env({"RANK": "2", "WORLD_SIZE": "2", "LOCAL_RANK": "0"})
    with pytest.raises(UserError, match="not integers"):
        distributed.read_env({"RANK": "x", "WORLD_SIZE": "2", "LOCAL_RANK": "0"})
    assert not distributed.launched_by_torchrun({"RANK": "0"})


def test_setup_without_torchrun_is_single_process(monkeypatch):
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(k, raising=False)
    with distributed.session("cpu") as ctx:
        assert (ctx.rank, ctx.world_size, ctx.distributed, ctx.is_writer) == (0, 1, False, True)
        model = object()
        assert distributed.wrap(model, ctx) is model
        assert distributed.make_sampler(list(range(10)), ctx, seed=0) is None
        assert distributed.all_gather(ctx, 5) == [5]


def test_linear_lr_scaling_uses_global_batch():
    assert distributed.scaled_lr(0.1, 64, 4, "linear") == pytest.approx(0.1 * 256 / 256)
    assert distributed.scaled_lr(0.1, 64, 1, "linear") == pytest.approx(0.1 * 64 / 256)
    assert distributed.scaled_lr(0.1, 64, 8, "none") == 0.1
    with pytest.raises(UserError, match="lr-scale"):
        distributed.scaled_lr(0.1, 64, 2, "sqrt")


def test_sampler_shards_are_disjoint_and_cover_the_epoch():
    data = list(range(101))
    shards = []
    for rank in range(2):
        ctx = DistContext(rank=rank, world_size=2, backend="gloo")
        s = distributed.make_sampler(data, ctx, seed=3)
        distributed.set_epoch(s, 1)
        shards.append(list(s))
    assert len(shards[0]) == len(shards[1]) == 50  # drop_last: equal steps on every rank
    assert not set(shards[0]) & set(shards[1])
    # the same (seed, epoch) gives the same order: what makes a resumed run exact
    again = distributed.make_sampler(data, DistContext(rank=0, world_size=2, backend="gloo"), seed=3)
    distributed.set_epoch(again, 1)
    assert list(again) == shards[0]
    distributed.set_epoch(again, 2)
    assert list(again) != shards[0]


def test_sync_check_catches_a_diverged_rank(monkeypatch):
    model = torch.nn.Linear(4, 2)
    before = distributed.params_digest(model)
    with torch.no_grad():
        model.weight[0, 0] += 1e-7  # smallest change still changes the bytes
    after = distributed.params_digest(model)
    assert before != after
    ctx = DistContext(rank=0, world_size=2, backend="gloo")
    monkeypatch.setattr(distributed, "all_gather", lambda c, obj: [obj, before])
    with pytest.raises(RuntimeError, match="diverged at step 7"):
        distributed.check_in_sync(model, ctx, 7)
    monkeypatch.setattr(distributed, "all_gather", lambda c, obj: [obj, obj])
    distributed.check_in_sync(model, ctx, 8)
    assert ctx.sync_checks == 2


def test_summary_aggregates_and_scaling_efficiency():
    ranks = [{"samples": 1000, "window_s": 2.0, "throughput_samples_s": 500.0, "peak_bytes": 10},
             {"samples": 1000, "window_s": 2.5, "throughput_samples_s": 400.0, "peak_bytes": 30}]
    s = distributed.summarize(ranks, baseline_throughput=500.0)
    assert s["aggregate_throughput_samples_s"] == 800.0  # 2000 samples over the slowest rank's 2.5 s
    assert s["scaling_efficiency"] == pytest.approx(800 / (2 * 500))
    assert s["speedup"] == pytest.approx(1.6)
    assert s["peak_bytes_max"] == 30
    assert distributed.summarize(ranks)["scaling_efficiency"] is None


def test_launch_command_strips_nproc_and_shares_cores(monkeypatch):
    args = launch.strip_nproc(["train", "--nproc", "2", "--model", "cnn", "--nproc=3", "--steps", "4"])
    assert args == ["train", "--model", "cnn", "--steps", "4"]
    cmd = launch.torchrun_command(2, python="py")
    assert cmd == ["py", "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", "-m", "trainserve"]
    with pytest.raises(UserError, match="--nproc 0"):
        launch.torchrun_command(0, "worker.mod")
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.delenv("NCCL_NVLS_ENABLE", raising=False)
    env = launch.child_env("cuda", 2, args)
    assert json.loads(env[launch.ARGV_ENV]) == args
    assert env["NCCL_NVLS_ENABLE"] == "0" and env["TORCH_SYMM_MEM_DISABLE_MULTICAST"] == "1"
    assert int(env["OMP_NUM_THREADS"]) >= 1
    assert "NCCL_NVLS_ENABLE" not in launch.child_env("cpu", 2)


# --- real runs: `trainserve train --nproc 2` on CPU (gloo) ------------------------------------------

TINY = ["--model", "mlp", "--preset", "tiny", "--device", "cpu", "--batch-size", "32", "--samples", "512",
        "--warmup-steps", "2"]


def _train(tmp_path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    # OMP_NUM_THREADS=1: two ranks on two cores, no oversubscription on a loaded CI machine
    env = subprocess_env(TRAINSERVE_DDP_CHECK_SYNC="1", OMP_NUM_THREADS="1")
    before = {p.pid for p in psutil.Process().children(recursive=True)}  # other tests' servers
    proc = subprocess.Popen(trainserve_cmd("train", "--nproc", "2", *TINY, "--runs-dir", str(tmp_path), *args),
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
    finally:
        _stop_tree(proc)
    left = [p for p in psutil.Process().children(recursive=True) if p.pid not in before]
    assert not left, f"a training process outlived the run: {left}"
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, "")


def _stop_tree(proc: subprocess.Popen) -> None:
    """Kill the launcher and anything it started (only reached when a test fails or times out)."""
    if proc.poll() is None:
        kids = psutil.Process(proc.pid).children(recursive=True)
        proc.kill()
        proc.wait()
        for k in kids:
            with contextlib.suppress(psutil.NoSuchProcess):
                k.kill()
        psutil.wait_procs(kids, timeout=5)


@pytest.mark.slow
def test_two_processes_train_in_sync_then_resume_until_ctrl_c(tmp_path):
    r = _train(tmp_path, "--epochs", "2", "--run", "ddp")
    assert r.returncode == 0, r.stdout[-3000:]
    out = tmp_path / "ddp" / "train"
    hist = json.loads((out / "history.json").read_text())["epochs"]
    assert [h["step"] for h in hist] == [8, 16]  # 512 rows / (32 per rank x 2 ranks) = 8 steps per epoch
    assert hist[1]["train_loss"] < hist[0]["train_loss"]  # loss falls
    prof = json.loads((out / "profile.json").read_text())
    ddp = prof["extra"]["ddp"]
    assert (ddp["world_size"], ddp["backend"], ddp["global_batch_size"]) == (2, "gloo", 64)
    assert ddp["sync_checks"] == 16  # ranks compared (bitwise identical) after every one of the 16 steps
    ranks = prof["extra"]["ranks"]
    assert [x["rank"] for x in ranks] == [0, 1] and all(x["throughput_samples_s"] > 0 for x in ranks)
    assert prof["speed"]["throughput_samples_s"] == ddp["aggregate_throughput_samples_s"]
    assert prof["speed"]["throughput_samples_s"] > max(x["throughput_samples_s"] for x in ranks) * 0.9
    state = torch.load(out / "checkpoint.pt", weights_only=True)
    assert state["step"] == 16 and not any(k.startswith("module.") for k in state["model"])

    # resume from that checkpoint with a long schedule; stop it with Ctrl-C once it has gone on
    env = subprocess_env(TRAINSERVE_DDP_CHECK_SYNC="1", OMP_NUM_THREADS="1")
    proc = subprocess.Popen(trainserve_cmd("train", "--nproc", "2", *TINY, "--runs-dir", str(tmp_path),
                                           "--epochs", "1000", "--run", "ddp", "--resume"),
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 90
        resumed = state
        while resumed["step"] < 24:  # rank 0 rewrites the checkpoint (atomically) after each epoch
            assert proc.poll() is None, "the resumed run stopped"
            assert time.monotonic() < deadline, "the resumed run made no progress"
            time.sleep(0.2)
            resumed = torch.load(out / "checkpoint.pt", weights_only=True)
        assert [h["step"] for h in resumed["history"][:3]] == [8, 16, 24]  # continued, not restarted
        assert resumed["history"][:2] == hist
        assert not torch.equal(resumed["model"]["net.0.weight"], state["model"]["net.0.weight"])
        kids = psutil.Process(proc.pid).children(recursive=True)
        assert len(kids) >= 3  # torchrun and two workers
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=45) != 0
        _, alive = psutil.wait_procs(kids, timeout=10)
        assert not alive, f"still running after Ctrl-C: {alive}"
    finally:
        _stop_tree(proc)
