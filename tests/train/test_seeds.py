"""Time to accuracy over seeds (--seeds N, train/seeds.py): N real trainings to the target, mean ± sample sd
in the run's record and in the report; bad values are one sentence."""

from __future__ import annotations

import json
import statistics

import pytest
from typer.testing import CliRunner

from trainserve.cli import app
from trainserve.core.errors import UserError
from trainserve.core.profile import TimeToAccuracy
from trainserve.report import build_report
from trainserve.train.seeds import resolve_seeds, summarise

runner = CliRunner()


def test_mean_and_sample_sd_over_the_seeds_that_reached_it():
    def tta(s: float | None) -> TimeToAccuracy:
        return TimeToAccuracy(target_accuracy=0.9, reached=s is not None, time_to_accuracy_s=s,
                              epochs_to_accuracy=2 if s else None)

    out = summarise([(0, tta(10.0)), (1, tta(14.0)), (2, tta(None)), (3, tta(12.0))])
    assert (out["n"], out["reached"]) == (4, 3)
    assert out["mean_seconds"] == pytest.approx(12.0)
    assert out["sd_seconds"] == pytest.approx(statistics.stdev([10.0, 14.0, 12.0]))  # n - 1 in the denominator
    assert [r["seed"] for r in out["runs"]] == [0, 1, 2, 3] and out["runs"][2]["reached"] is False


def test_three_seeds_by_default_with_a_target_and_one_without():
    assert resolve_seeds(None, 0.9) == 3 and resolve_seeds(None, None) == 1 and resolve_seeds(5, 0.9) == 5
    with pytest.raises(UserError, match="add --target-accuracy"):
        resolve_seeds(2, None)
    with pytest.raises(UserError, match="--seeds 0 is invalid"):
        resolve_seeds(0, 0.9)


def test_seeds_train_to_the_target_and_the_report_shows_mean_and_sd(tmp_path):
    r = runner.invoke(app, ["train", "--model", "mlp", "--dataset", "digits", "--device", "cpu", "--runs-dir",
                            str(tmp_path), "--run", "s", "--lr", "0.01", "--epochs", "6", "--warmup-steps", "2",
                            "--target-accuracy", "0.85", "--seeds", "2"])
    assert r.exit_code == 0, r.output
    train = tmp_path / "s" / "train"
    rec = json.loads((train / "profile.json").read_text())
    sd = rec["extra"]["time_to_accuracy_seeds"]
    assert sd["n"] == 2 and [x["seed"] for x in sd["runs"]] == [0, 1]
    assert sd["runs"][0]["time_to_accuracy_s"] == rec["time_to_accuracy"]["time_to_accuracy_s"]  # the run itself
    reached = [x["time_to_accuracy_s"] for x in sd["runs"] if x["reached"]]
    assert sd["reached"] == len(reached) >= 1 and sd["mean_seconds"] == pytest.approx(statistics.fmean(reached))
    assert not (train / ".seeds").exists()  # the other seeds' folders are gone
    report = build_report(tmp_path / "s").parent
    assert "(2 seeds" in (report / "report.md").read_text()
    from tests.trainserve.test_summary_schema import _errors

    summary = json.loads((report / "summary.json").read_text())
    assert summary["models"]["mlp"]["time_to_accuracy"]["cpu"]["seeds"]["n"] == 2 and _errors(summary) == []


def test_seeds_with_resume_is_one_sentence(tmp_path):
    r = runner.invoke(app, ["train", "--device", "cpu", "--runs-dir", str(tmp_path), "--run", "x", "--resume",
                            "--target-accuracy", "0.5", "--seeds", "2"])
    assert r.exit_code == 1 and "drop --nproc and --resume" in r.output
