"""--target-accuracy: real training on scikit-learn's digits stops at the first eval that reaches the target,
and the record says what it took; AccuracyTarget alone with a crafted energy counter; bad values."""

import json
import math

import pytest
from typer.testing import CliRunner

from trainserve.train.config import TrainConfig
from trainserve.train.loop import fit
from trainserve.train.target import AccuracyTarget
from trainserve.cli import app
from trainserve.core.errors import UserError
from trainserve.core.profile import ProfileRecord, TimeToAccuracy

BUDGET = 12  # epochs: far more than the mlp needs for 85% on digits (about 2 at this learning rate)


def _digits(tmp_path, name, target, epochs=BUDGET, lr=1e-2):
    cfg = TrainConfig(model="mlp", dataset="digits", device="cpu", batch_size=64, lr=lr, epochs=epochs,
                      warmup_steps=2, target_accuracy=target)
    return fit(cfg, tmp_path / name)


def test_stops_at_the_first_epoch_that_reaches_the_target(tmp_path):
    r = _digits(tmp_path, "reach", 0.85)
    t = r.record.time_to_accuracy
    assert t.reached is True and t.target_accuracy == 0.85
    assert len(r.history) < BUDGET, "training went on after the target was reached"
    last = r.history[-1]
    assert last["test_accuracy"] >= 0.85 and all(h["test_accuracy"] < 0.85 for h in r.history[:-1])
    assert t.epochs_to_accuracy == last["epoch"] == len(r.history) == t.epochs_run
    assert t.steps_to_accuracy == last["step"] and t.test_accuracy == last["test_accuracy"]
    assert 0 < t.time_to_accuracy_s <= r.record.extra["wall_s"] + 1e-3
    # energy only from a counter: this host's RAPL may be unreadable, and then it is null, never a guess
    assert (t.energy_to_accuracy_j is None) == (t.energy_source is None)
    on_disk = json.loads((tmp_path / "reach" / "profile.json").read_text())["time_to_accuracy"]
    assert on_disk["reached"] is True and on_disk["epochs_to_accuracy"] == t.epochs_to_accuracy
    assert len(json.loads((tmp_path / "reach" / "history.json").read_text())["epochs"]) == len(r.history)


def test_budget_ending_first_records_not_reached(tmp_path):
    r = _digits(tmp_path, "short", 1.0, epochs=1, lr=1e-3)  # one slow epoch cannot classify every test digit
    t = r.record.time_to_accuracy
    assert t.reached is False and t.epochs_run == 1 and len(r.history) == 1
    assert t.time_to_accuracy_s is None and t.epochs_to_accuracy is None and t.energy_to_accuracy_j is None
    assert t.test_accuracy == r.history[-1]["test_accuracy"] < 1.0


def test_evaluates_every_epoch_even_when_eval_each_epoch_is_off(tmp_path):
    cfg = TrainConfig(model="mlp", dataset="digits", device="cpu", batch_size=64, lr=1e-3, epochs=2,
                      warmup_steps=2, eval_each_epoch=False, target_accuracy=1.0)
    r = fit(cfg, tmp_path / "r")
    assert all("test_accuracy" in h for h in r.history)


class _Counter:
    """A sampler whose cumulative counters advance 5 J (GPU) and 2 J (CPU) per reading."""

    def __init__(self, gpu=True, cpu=True):
        self.n, self.gpu, self.cpu = 0, gpu, cpu

    def reading(self):
        self.n += 1
        return type("S", (), {"gpu_energy_j": 1000.0 + 5 * self.n if self.gpu else None,
                              "cpu_energy_j": 10.0 + 2 * self.n if self.cpu else None})()


def test_target_alone_meters_energy_between_start_and_the_reaching_eval():
    t = AccuracyTarget(0.9, "cuda", _Counter())
    t.start()
    assert t.check(1, 10, 0.5) is False and t.check(2, 20, None) is False
    assert t.check(3, 30, 0.9) is True  # at the target counts as reached
    assert t.check(4, 40, 0.95) is False  # only the first time
    r = t.result()
    assert (r.epochs_to_accuracy, r.steps_to_accuracy, r.test_accuracy) == (3, 30, 0.9)
    assert r.energy_to_accuracy_j == 5.0 and r.energy_source == "nvml"
    cpu = AccuracyTarget(0.5, "cpu", _Counter())
    cpu.start()
    cpu.check(1, 4, 0.7)
    assert cpu.result().energy_to_accuracy_j == 2.0 and cpu.result().energy_source == "rapl"


@pytest.mark.parametrize("sampler", [None, _Counter(gpu=False, cpu=False)])
def test_target_without_an_energy_counter_leaves_energy_null(sampler):
    t = AccuracyTarget(0.5, "cuda", sampler)
    t.start()
    assert t.check(1, 4, 0.6) is True
    assert t.result().energy_to_accuracy_j is None and t.result().energy_source is None


def test_record_round_trip_and_old_records():
    rec = ProfileRecord(phase="train", model="mlp", backend="torch", device="cpu")
    rec.time_to_accuracy = TimeToAccuracy(0.9, True, 1.5, 2, 40, None, None, 0.91, 2)
    back = ProfileRecord.from_dict(json.loads(json.dumps(rec.to_dict())))
    assert back.time_to_accuracy == rec.time_to_accuracy
    old = rec.to_dict()
    del old["time_to_accuracy"]  # written before the field existed
    assert ProfileRecord.from_dict(old).time_to_accuracy is None


@pytest.mark.parametrize("bad", [0.0, -0.5, 1.01, math.nan])
def test_bad_targets_are_refused(bad):
    with pytest.raises(UserError, match="0 < A <= 1"):
        TrainConfig(target_accuracy=bad)


runner = CliRunner()


@pytest.mark.parametrize("args,match", [
    (["train", "--device", "cpu", "--target-accuracy", "1.5"], "--target-accuracy 1.5 is out of range"),
    (["train", "--device", "cpu", "--target-accuracy", "-1"], "--target-accuracy -1.0 is out of range"),
    (["compare", "--target-accuracy", "0.9"], "add --no-sweep"),
])
def test_bad_target_on_the_command_line_is_one_sentence(tmp_path, args, match):
    r = runner.invoke(app, [*args, "--runs-dir", str(tmp_path / "runs"), "--run", "R"])
    assert r.exit_code == 1, r.output
    lines = [ln for ln in r.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and match in lines[0], r.output
    assert not (tmp_path / "runs" / "R" / "train").exists()


def test_the_command_line_says_whether_it_was_reached(tmp_path):
    base = ["train", "--model", "mlp", "--dataset", "digits", "--device", "cpu", "--runs-dir", str(tmp_path)]
    r = runner.invoke(app, [*base, "--run", "a", "--lr", "0.01", "--epochs", str(BUDGET), "--target-accuracy", "0.85"])
    assert r.exit_code == 0, r.output
    assert "target accuracy 85.00% reached on cpu after" in " ".join(r.output.split())
    r = runner.invoke(app, [*base, "--run", "b", "--lr", "0.001", "--epochs", "1", "--target-accuracy", "1",
                            "--seeds", "1"])
    assert r.exit_code == 0, r.output
    assert "target accuracy 100.00% not reached on cpu within 1 epoch" in " ".join(r.output.split())
