"""train/sharding.py: `trainserve train --nproc 2 --shard` (FSDP2 on gloo) against the same run under DDP."""

from __future__ import annotations

import json

import pytest
import torch
from typer.testing import CliRunner

from tests.train.test_distributed import _train
from trainserve.cli import app


@pytest.mark.slow
def test_two_sharded_processes_train_as_ddp_does_holding_half_each(tmp_path):
    for run, extra in (("ddp", ("--epochs", "2")), ("fsdp", ("--epochs", "2", "--shard")),
                       ("resumed", ("--epochs", "1", "--shard")), ("resumed", ("--epochs", "2", "--shard", "--resume"))):
        r = _train(tmp_path, "--run", run, *extra)
        assert r.returncode == 0, r.stdout[-3000:]
    ddp, fsdp = (json.loads((tmp_path / run / "train" / "profile.json").read_text()) for run in ("ddp", "fsdp"))
    assert (ddp["extra"]["ddp"]["parallelism"], fsdp["extra"]["ddp"]["parallelism"]) == ("ddp", "fsdp2")
    # the same arithmetic: same seed, same data on each rank, the same losses
    losses = [[e["train_loss"] for e in json.loads((tmp_path / run / "train" / "history.json").read_text())["epochs"]]
              for run in ("ddp", "fsdp", "resumed")]
    assert losses[1] == pytest.approx(losses[0], rel=1e-4)
    # a sharded run resumed from its whole checkpoint goes on as the uninterrupted one did
    assert losses[2] == pytest.approx(losses[1], rel=1e-4)
    # each rank holds about half the parameters, gradients and optimizer state (the tiny model's shards are even)
    for part in ("weights_bytes", "gradients_bytes", "optimizer_bytes"):
        assert fsdp["memory"][part] == pytest.approx(ddp["memory"][part] / 2, rel=0.05), part
    # the checkpoint is whole: export and a single process read it as any other
    d, f = (torch.load(tmp_path / run / "train" / "checkpoint.pt", weights_only=False)["model"] for run in ("ddp", "fsdp"))
    assert d.keys() == f.keys() and all(d[k].shape == f[k].shape for k in d)


def test_shard_without_processes_is_one_sentence(tmp_path):
    r = CliRunner().invoke(app, ["train", "--shard", "--runs-dir", str(tmp_path), "--device", "cpu"])
    assert r.exit_code == 1 and "--shard splits the model across the --nproc processes" in r.output
    assert "Traceback" not in r.output


def test_offload_on_the_cpu_or_without_shard_is_one_sentence(tmp_path):
    runs = ["--runs-dir", str(tmp_path)]
    r = CliRunner().invoke(app, ["train", "--offload", "--shard", "--nproc", "2", "--device", "cpu", *runs])
    assert r.exit_code == 1 and "Traceback" not in r.output
    assert "on --device cpu it is in host memory already; drop --offload, or train with --device cuda" in r.output
    r = CliRunner().invoke(app, ["train", "--offload", "--device", "cpu", *runs])
    assert r.exit_code == 1 and "add --shard (with --nproc N), or drop --offload" in r.output
