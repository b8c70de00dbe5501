"""`trainserve run` on a model that is not in the zoo, for real: a token model of the user's own in a file
outside the repository, and an ONNX file trained elsewhere (inference only)."""

from __future__ import annotations

import hashlib
import json
import subprocess
import textwrap

import pytest
from typer.testing import CliRunner

from tests.conftest import REPO_ROOT, subprocess_env, trainserve_cmd
from trainserve.cli import app

# the tests make their ONNX files with the TorchScript exporter (fast, no onnxscript), which torch calls legacy
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

TOKEN_MODEL = textwrap.dedent("""
    import torch
    from torch import nn


    class Bag(nn.Module):  # (B, T) int64 token ids -> (B, K) logits
        def __init__(self, vocab=50, dim=16, classes=4):
            super().__init__()
            self.emb = nn.Embedding(vocab, dim)
            self.head = nn.Linear(dim, classes)

        def forward(self, ids):
            return self.head(self.emb(ids).mean(dim=1))


    def build():
        return Bag()
    """)


def _run(*args: str, timeout: float = 400) -> subprocess.CompletedProcess:
    proc = subprocess.run(trainserve_cmd("run", "--quick", "--device", "cpu", *args), cwd=REPO_ROOT,
                          env=subprocess_env(), capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


@pytest.mark.slow
@pytest.mark.timeout(420)
def test_a_token_model_in_a_file_outside_the_repo_trains_exports_serves_and_is_named(tmp_path):
    path = tmp_path / "users_code" / "bag_of_words.py"
    path.parent.mkdir()
    path.write_text(TOKEN_MODEL)
    runs = tmp_path / "runs"
    proc = _run("--model", f"{path}:build", "--input-shape", "12", "--input-dtype", "int64", "--vocab-size", "50",
                "--sweep-budget-s", "12", "--run", "mine", "--runs-dir", str(runs))
    assert "✓ load-cpu-saturated: saturated on bag_of_words_cpu" in proc.stdout
    root = runs / "mine"
    card = json.loads((root / "train" / "model.json").read_text())
    assert card["family"] == "user" and card["inputs"] == [{"name": "input", "shape": [12], "dtype": "int64"}]
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    assert card["config"]["sha256"] == digest
    verify = json.loads((root / "export" / "verify.json").read_text())
    assert verify["passed"] and set(verify["variants"]) == {"fp32", "fp16", "int8"}
    assert (root / "model_repository" / "bag_of_words_cpu" / "config.pbtxt").read_text().count("TYPE_INT64") == 1
    s = json.loads((root / "report" / "summary.json").read_text())
    m = s["models"]["bag_of_words"]
    assert m["train"]["cpu"]["throughput_samples_s"] > 0 and m["train"]["cpu"]["flops_per_sample"] > 0
    assert m["infer"]["onnxruntime"]["cpu"]["batch1"]["throughput_samples_s"] > 0
    assert m["limits"]["cpu"]["best_batch"] >= 1
    assert list((root / "sweep" / "cpu").glob("fp32-b*.json"))
    md = (root / "report" / "report.md").read_text()
    assert f"`{path}:build`" in md and digest in md and "data: synthetic" in md  # the report names the model


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_an_onnx_file_trained_elsewhere_is_served_limited_loaded_priced_and_planned(tmp_path):
    import torch

    model = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3)).eval()
    onnx_file = tmp_path / "from-the-lab.onnx"
    torch.onnx.export(model, (torch.randn(2, 6),), str(onnx_file), dynamo=False, input_names=["features"],
                      output_names=["scores"], dynamic_axes={"features": {0: "n"}, "scores": {0: "n"}})
    runs = tmp_path / "runs"
    proc = _run("--onnx", str(onnx_file), "--qps", "50", "--run", "lab", "--runs-dir", str(runs), timeout=250)
    assert "train" not in [line.split(":")[0].removeprefix("✓ ") for line in proc.stdout.splitlines()]
    root = runs / "lab"
    assert not (root / "train" / "checkpoint.pt").exists() and not (root / "sweep").exists()
    s = json.loads((root / "report" / "summary.json").read_text())
    m = s["models"]["from_the_lab"]
    assert m["train"] == {"cpu": None, "cuda": None} and m["trained_here"] is False
    assert m["infer"]["onnxruntime"]["cpu"]["saturated"]["throughput_samples_s"] > 0
    assert m["limits"]["cpu"]["best_throughput_samples_s"] > 0
    assert s["costs"]["models"] and s["plan"] is not None
    assert s["card"]["reference"] == str(onnx_file) and s["card"]["family"] == "onnx"
    md = (root / "report" / "report.md").read_text()
    assert "not trained here" in md and "not trained here" in (root / "report" / "report.html").read_text()


def test_an_onnx_file_with_a_fixed_batch_is_one_sentence(tmp_path):
    import torch

    onnx_file = tmp_path / "fixed.onnx"
    torch.onnx.export(torch.nn.Linear(4, 2).eval(), (torch.randn(1, 4),), str(onnx_file), dynamo=False,
                      input_names=["x"], output_names=["y"])
    result = CliRunner().invoke(app, ["run", "--quick", "--device", "cpu", "--onnx", str(onnx_file), "--run", "F",
                                      "--runs-dir", str(tmp_path / "runs")])
    assert result.exit_code == 1
    lines = [ln for ln in result.output.splitlines() if ln.strip()]
    assert lines[-1].startswith("error: ") and "has a fixed batch dimension of 1" in lines[-1], result.output
    assert not (tmp_path / "runs" / "F" / "model_repository").exists()
