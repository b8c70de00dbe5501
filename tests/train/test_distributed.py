"""train.distributed and train.launch: unit checks in process, then real 2-process gloo runs."""

from __future__ import annotations

import json

import pytest

from train import distributed, launch
from train.distributed import DistContext
from trainserve.errors import UserError

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
    torch = pytest.importorskip("torch")
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
    assert cmd == ["py", "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", "-m", "train.launch"]
    with pytest.raises(UserError, match="--nproc 0"):
        launch.torchrun_command(0)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.delenv("NCCL_NVLS_ENABLE", raising=False)
    env = launch.child_env("cuda", 2, args)
    assert json.loads(env[launch.ARGV_ENV]) == args
    assert env["NCCL_NVLS_ENABLE"] == "0" and env["TORCH_SYMM_MEM_DISABLE_MULTICAST"] == "1"
    assert int(env["OMP_NUM_THREADS"]) >= 1
    assert "NCCL_NVLS_ENABLE" not in launch.child_env("cpu", 2)
