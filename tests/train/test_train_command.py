"""`trainserve train` / `compare` through typer's CliRunner: the happy path and every bad input."""

import json

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from tests.docpaths import assert_documented_artifacts
from trainserve.cli import app

runner = CliRunner()
FAST = ["--samples", "64", "--batch-size", "16", "--warmup-steps", "1"]


def _train(tmp_path, *args):
    return runner.invoke(app, ["train", "--runs-dir", str(tmp_path / "runs"), "--run", "R", *args])


def _one_error_line(result, match):
    assert result.exit_code == 1, result.output
    lines = [ln for ln in result.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.output
    assert match in lines[0], lines[0]
    assert "Traceback" not in result.output


def test_happy_path_writes_every_artifact(tmp_path):
    r = _train(tmp_path, "--model", "cnn", "--preset", "tiny", "--device", "cpu", "--epochs", "1", *FAST)
    assert r.exit_code == 0, r.output
    out = tmp_path / "runs/R/train"
    assert sorted(p.name for p in out.iterdir()) == ["checkpoint.pt", "history.json", "model.json", "profile.json"]
    assert_documented_artifacts("train", tmp_path / "runs/R")
    prof = json.loads((out / "profile.json").read_text())
    assert prof["phase"] == "train" and prof["schema_version"] == 1 and prof["speed"]["throughput_samples_s"] > 0
    card = json.loads((out / "model.json").read_text())
    assert card["inputs"] == [{"name": "input", "shape": [3, 32, 32], "dtype": "float32"}]
    assert card["outputs"][0]["name"] == "logits" and 0 <= card["metrics"]["test_accuracy"] <= 1
    assert json.loads((out / "history.json").read_text())["epochs"][0]["epoch"] == 1
    state = torch.load(out / "checkpoint.pt", weights_only=True)
    assert state["epoch"] == 1 and state["card"]["family"] == "cnn"
    assert "samples/s" in r.output and "test accuracy" in r.output


def test_resume_through_the_cli(tmp_path):
    base = ["--model", "mlp", "--device", "cpu", *FAST]
    assert _train(tmp_path, *base, "--epochs", "1").exit_code == 0
    r = _train(tmp_path, *base, "--epochs", "2", "--resume")
    assert r.exit_code == 0, r.output
    hist = json.loads((tmp_path / "runs/R/train/history.json").read_text())["epochs"]
    assert [h["epoch"] for h in hist] == [1, 2]
    r = _train(tmp_path, *base, "--epochs", "2", "--resume")
    _one_error_line(r, "raise --epochs")


def _npz(tmp_path, name, **arrays):
    p = tmp_path / name
    np.savez(p, **arrays)
    return str(p)


BAD = {
    "batch 0": (["--batch-size", "0"], "batch_size=0"),
    "cuda without gpu": (["--device", "cuda"], "no CUDA GPU"),
    "missing npz": (["--dataset", "{tmp}/none.npz"], "not found"),
    "corrupt npz": (["--dataset", "{corrupt}"], "not a readable .npz"),
    "npz without y": (["--dataset", "{no_y}"], "no array 'y'"),
    "npz wrong shape": (["--model", "cnn", "--dataset", "{flat}"], "needs (rows, channels"),
    "npz wrong dtype": (["--model", "transformer", "--dataset", "{flat}"], "integer token ids"),
    "resume without checkpoint": (["--resume"], "no checkpoint"),
    "max batch on cpu": (["--find-max-batch"], "--find-max-batch needs a CUDA device"),
    # --model also takes a reference to your own function, so it is not a fixed choice
    "unknown model": (["--model", "rnn"], "'rnn' is neither a zoo family (mlp, cnn, transformer) nor a reference"),
}


NOT_A_CHOICE = {
    "unknown preset": (["--preset", "huge"], "'huge' is not one of 'tiny', 'small', 'base'"),
    "bad device list": (["--device", "cpu,tpu"], "'cpu,tpu' is not one of 'cpu', 'cuda', 'auto', 'cpu,cuda'"),
    "unknown precision": (["--precision", "fp8"], "'fp8' is not one of 'fp32', 'bf16', 'fp16'"),
}


@pytest.mark.parametrize("case", list(NOT_A_CHOICE))
def test_a_value_not_among_the_choices_is_refused_by_the_command_line(tmp_path, case):
    args, match = NOT_A_CHOICE[case]
    r = _train(tmp_path, *args)
    assert r.exit_code == 2, r.output  # typer's usage error, listing the choices (also in --help)
    text = " ".join(r.output.replace("│", " ").split())  # unwrapped from its box
    assert match in text and "Traceback" not in text
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("case", list(BAD))
def test_bad_input_is_one_line_and_writes_nothing(tmp_path, case):
    if case == "cuda without gpu" and torch.cuda.is_available():
        pytest.skip("a GPU is visible")
    corrupt = tmp_path / "corrupt.npz"
    corrupt.write_bytes(b"\x00garbage")
    paths = {"tmp": tmp_path, "corrupt": corrupt, "no_y": _npz(tmp_path, "no_y.npz", x=np.zeros((8, 4))),
             "flat": _npz(tmp_path, "flat.npz", x=np.random.rand(8, 4), y=np.arange(8) % 2)}
    args, match = BAD[case]
    r = _train(tmp_path, "--device", "cpu", *[a.format(**paths) for a in args])
    _one_error_line(r, match)
    assert not (tmp_path / "runs").exists()


def test_precision_the_device_cannot_do(tmp_path, monkeypatch):
    from trainserve.train import device as train_device

    monkeypatch.setattr(train_device, "precision_supported", lambda device, precision: False)
    r = _train(tmp_path, "--device", "cpu", "--precision", "fp16")
    _one_error_line(r, "--precision fp16 is not supported")
    assert not (tmp_path / "runs").exists()


def test_corrupt_checkpoint_on_resume_leaves_the_folder_as_it_was(tmp_path):
    out = tmp_path / "runs/R/train"
    out.mkdir(parents=True)
    (out / "checkpoint.pt").write_bytes(b"PK\x03\x04 truncated")
    r = _train(tmp_path, "--device", "cpu", "--resume")
    _one_error_line(r, "corrupt")
    assert [p.name for p in out.iterdir()] == ["checkpoint.pt"]


def test_compare_sweeps_the_cpu_into_the_folder_the_architecture_names(tmp_path, monkeypatch):
    from trainserve.commands import _sweep_view
    from trainserve.train.sweep import SweepConfig

    # two small fp32 points, so the generous budget never decides (a loaded machine cannot make it flaky)
    monkeypatch.setattr(_sweep_view, "SweepConfig", lambda budget_s: SweepConfig(
        budget_s=budget_s, min_batch=4, max_batch=8, precisions=("fp32",), warmup_steps=1, timed_steps=2))
    r = runner.invoke(app, ["compare", "--device", "cpu", "--sweep-budget-s", "120", "--model", "mlp", "--samples", "64",
                            "--runs-dir", str(tmp_path / "runs"), "--run", "R"])
    assert r.exit_code == 0, r.output
    assert_documented_artifacts("compare", tmp_path / "runs/R")


def test_compare_without_gpu_is_a_user_error(tmp_path):
    if torch.cuda.is_available():
        pytest.skip("a GPU is visible")
    r = runner.invoke(app, ["compare", "--no-sweep", "--runs-dir", str(tmp_path / "runs"), "--run", "R"])
    _one_error_line(r, "needs a CUDA GPU")
    r = _train(tmp_path, "--device", "cpu,cuda")
    _one_error_line(r, "needs a CUDA GPU")
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("budget", ["0", "-3"])
def test_compare_bad_sweep_budget_is_one_sentence(tmp_path, budget):
    r = runner.invoke(app, ["compare", "--sweep-budget-s", budget, "--runs-dir", str(tmp_path / "runs"), "--run", "R"])
    _one_error_line(r, f"--sweep-budget-s {budget} is invalid; give the seconds each device's sweep may take")
    assert not (tmp_path / "runs").exists()


def test_compare_device_needs_the_sweep(tmp_path):
    r = runner.invoke(app, ["compare", "--no-sweep", "--device", "cpu", "--runs-dir", str(tmp_path / "runs")])
    _one_error_line(r, "--device 'cpu' needs --sweep")


@pytest.mark.parametrize("where", ["file", "inside a file"])
def test_a_runs_dir_that_is_a_file_is_one_sentence_before_any_training(tmp_path, where):
    blocker = tmp_path / "blocker"
    blocker.write_text("a file, not a folder")
    runs = blocker if where == "file" else blocker / "runs"
    r = runner.invoke(app, ["train", "--runs-dir", str(runs), "--run", "R", "--device", "cpu", *FAST])
    _one_error_line(r, f"{blocker} is a file, so the run folder {runs / 'R'} cannot be made")
    assert blocker.read_text() == "a file, not a folder"


def test_a_read_only_runs_dir_is_one_sentence_before_any_training(tmp_path, monkeypatch):
    import trainserve.core.runs

    runs = tmp_path / "runs"
    runs.mkdir()
    # as root a 0555 folder is still writable, so ask the check as an ordinary user's access() would answer
    monkeypatch.setattr(trainserve.core.runs, "_can_write", lambda folder: False)
    r = runner.invoke(app, ["train", "--runs-dir", str(runs), "--run", "R", "--device", "cpu", *FAST])
    _one_error_line(r, f"{runs} is not writable, so the run folder {runs / 'R'} cannot be written")
    assert list(runs.iterdir()) == []


def test_training_a_trained_run_again_needs_resume_or_overwrite(tmp_path):
    assert _train(tmp_path, "--device", "cpu", "--epochs", "1", *FAST).exit_code == 0
    ckpt = tmp_path / "runs" / "R" / "train" / "checkpoint.pt"
    before = ckpt.read_bytes()
    r = _train(tmp_path, "--device", "cpu", "--epochs", "1", *FAST)
    _one_error_line(r, "run 'R' already has a trained model")
    assert ckpt.read_bytes() == before  # the finished run is untouched
    again = _train(tmp_path, "--device", "cpu", "--epochs", "1", "--seed", "1", "--overwrite", *FAST)
    assert again.exit_code == 0, again.output
    assert ckpt.read_bytes() != before
