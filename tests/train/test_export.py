"""train/export.py + train/verify.py + the export command: the zoo exports, verifies and becomes a repository."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as pb
from typer.testing import CliRunner

from tests.docpaths import assert_documented_artifacts
from trainserve.serve.repository import RepositoryConfig, list_models, read_model_config
from trainserve.train import export as export_mod
from trainserve.train import verify as verify_mod
from trainserve.core.card import ModelCard, TensorSpec, example_inputs
from trainserve.publish import export_and_publish
from trainserve.train.export import ExportConfig, export_onnx, load_model
from trainserve.train.models import build_model, config_to_dict, io_spec, preset_config
from trainserve.cli import app
from trainserve.core.errors import UserError

FAST = ExportConfig(verify_batches=(1, 64), eval_limit=64, seed=0)


def make_run(runs: Path, name: str, family: str) -> Path:
    """A run folder as trainserve train leaves it: train/{checkpoint.pt, model.json} (untrained weights)."""
    torch.manual_seed(0)
    config = preset_config(family, "tiny")
    inputs, outputs = io_spec(config)
    card = ModelCard(family=family, preset="tiny", config=config_to_dict(config),
                     inputs=[TensorSpec(**t) for t in inputs], outputs=[TensorSpec(**t) for t in outputs],
                     classes=[f"c{i}" for i in range(config.num_classes)])
    train_dir = runs / name / "train"
    train_dir.mkdir(parents=True)
    card.save(train_dir)
    torch.save({"model": build_model(config).state_dict(), "epoch": 0, "step": 0, "card": card.to_dict()},
               train_dir / "checkpoint.pt")
    return runs / name


@pytest.fixture
def quick_exporter(monkeypatch):
    """Tests about what happens around the export use the TorchScript exporter: ~0.2 s instead of ~5 s."""
    monkeypatch.setattr(export_mod, "_export_dynamo", export_mod._export_torchscript)


@pytest.fixture(scope="module", params=["mlp", "cnn", "transformer"])
def exported(request, tmp_path_factory):
    run = make_run(tmp_path_factory.mktemp("runs"), request.param, request.param)
    result = export_and_publish(run, run / "train" / "checkpoint.pt", run / "train" / "model.json", FAST,
                        RepositoryConfig(cpu_variant="int8", max_batch_size=32))
    return request.param, run, result


def test_zoo_exports_verifies_and_writes_repository(exported) -> None:
    family, run, result = exported
    verify = json.loads((run / "export" / "verify.json").read_text())
    assert verify["passed"] and verify["relative_error"].startswith("max|onnx - torch|")
    assert set(verify["variants"]) == {"fp32", "fp16", "int8"}
    for name, tol in (("fp32", 1e-4), ("fp16", 1e-2), ("int8", 5e-2)):
        v = verify["variants"][name]
        assert v["provider"] == "CPUExecutionProvider" and v["tolerance_rel"] == tol
        assert 0 <= v["max_rel"] <= tol and [b["batch"] for b in v["batches"]] == [1, 64]
        assert 0.0 <= v["accuracy"] <= 1.0 and v["accuracy_delta"] == pytest.approx(v["accuracy"] - verify["variants"]["fp32"]["accuracy"])
    assert verify["variants"]["fp16"]["max_rel"] > 0  # fp16 really is a different model
    info = json.loads((run / "export" / "export.json").read_text())
    assert info["exporter"] == "dynamo" and info["opset"] >= 17 and info["fallback_reason"] is None
    assert info["variants"]["int8"]["bytes"] < info["variants"]["fp32"]["bytes"]

    models = list_models(run / "model_repository")
    assert [(m.name, m.versions) for m in models] == [(f"{family}_{k}", [1]) for k in ("cpu", "cpu_nobatch", "gpu",
                                                                                     "gpu_nobatch")]
    # beside each model, the same file with batching off: what dynamic batching is measured against
    for kind in ("cpu", "gpu"):
        off = read_model_config(run / "model_repository" / f"{family}_{kind}_nobatch")
        assert off.max_batch_size == 1 and not off.HasField("dynamic_batching")
        assert (run / "model_repository" / f"{family}_{kind}_nobatch" / "1" / "model.onnx").read_bytes() == \
            (run / "model_repository" / f"{family}_{kind}" / "1" / "model.onnx").read_bytes()
    models = [m for m in models if not m.name.endswith("_nobatch")]
    assert (run / "model_repository" / f"{family}_cpu" / "1" / "model.onnx").read_bytes() == \
        (run / "export" / "model.int8.onnx").read_bytes()
    assert (run / "model_repository" / f"{family}_gpu" / "1" / "model.onnx").read_bytes() == \
        (run / "export" / "model.fp16.onnx").read_bytes()
    card = ModelCard.load(run / "train")
    for m in models:
        parsed = text_format.Parse((m.model_dir / "config.pbtxt").read_text(), pb.ModelConfig())
        assert parsed.name == m.name and parsed.platform == "onnxruntime_onnx" and parsed.max_batch_size == 32
        assert [(i.name, list(i.dims)) for i in parsed.input] == [(t.name, t.shape) for t in card.inputs]
        want_type = "TYPE_INT64" if family == "transformer" else "TYPE_FP32"
        assert pb.DataType.Name(parsed.input[0].data_type) == want_type
        # the ONNX file really batches (auto-complete agrees with the generated config)
        derived = read_model_config(m.model_dir)
        assert derived.max_batch_size == 32 and list(derived.output[0].dims) == [10]
        assert derived.output[0].data_type == pb.TYPE_FP32  # fp32 I/O kept for the fp16 and int8 variants


def test_onnx_matches_torch_on_a_new_batch_size(exported) -> None:
    family, run, _ = exported
    model, card, meta = load_model(run / "train" / "checkpoint.pt", run / "train" / "model.json")
    assert meta == {"epoch": 0, "step": 0}
    inputs = example_inputs(card, 7, seed=123)
    got = verify_mod.cpu_session(run / "export" / "model.onnx").run(None, inputs)[0]
    want = verify_mod.torch_outputs(model, inputs, card)["logits"]
    assert got.shape == (7, 10) and np.abs(got - want).max() <= 1e-4 * np.abs(want).max()


def test_torchscript_fallback_is_used_and_recorded(tmp_path, monkeypatch, caplog) -> None:
    run = make_run(tmp_path, "r", "mlp")
    model, card, _ = load_model(run / "train" / "checkpoint.pt", None)

    def broken(*args, **kwargs):
        raise RuntimeError("dynamo says no")

    monkeypatch.setattr(export_mod, "_export_dynamo", broken)
    info = export_onnx(model, card, tmp_path / "m.onnx")
    assert info["exporter"] == "torchscript" and "dynamo says no" in info["fallback_reason"]
    assert "falling back to the TorchScript exporter" in caplog.text
    monkeypatch.setattr(export_mod, "_export_torchscript", broken)
    with pytest.raises(UserError, match="failed with both exporters"):
        export_onnx(model, card, tmp_path / "m2.onnx")


def test_verification_failure_writes_no_repository(tmp_path, monkeypatch, quick_exporter) -> None:
    run = make_run(tmp_path, "r", "mlp")
    monkeypatch.setitem(verify_mod.TOLERANCE_REL, "fp16", 1e-9)
    with pytest.raises(UserError, match=r"verification failed \(fp16 batch 1: logits relative error"):
        export_and_publish(run, run / "train" / "checkpoint.pt", run / "train" / "model.json", FAST, RepositoryConfig())
    assert not (run / "model_repository").exists()
    verify = json.loads((run / "export" / "verify.json").read_text())
    assert verify["passed"] is False and verify["variants"]["fp16"]["passed"] is False
    assert verify["variants"]["fp32"]["passed"] is True


def test_bad_checkpoints_are_user_errors(tmp_path) -> None:
    run = make_run(tmp_path, "r", "mlp")
    card = run / "train" / "model.json"
    (tmp_path / "junk.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(UserError, match="not a loadable checkpoint"):
        load_model(tmp_path / "junk.pt", card)
    torch.save({"weights": {}}, tmp_path / "nomodel.pt")
    with pytest.raises(UserError, match="no 'model' state_dict"):
        load_model(tmp_path / "nomodel.pt", card)
    torch.save({"model": {}, "extra": object()}, tmp_path / "pickled.pt")  # weights_only refuses objects
    with pytest.raises(UserError, match="not a loadable checkpoint"):
        load_model(tmp_path / "pickled.pt", card)
    other = make_run(tmp_path, "cnn", "cnn")
    with pytest.raises(UserError, match="was trained as cnn"):
        load_model(other / "train" / "checkpoint.pt", card)
    state = torch.load(run / "train" / "checkpoint.pt", weights_only=True)
    state["model"]["net.0.weight"] = torch.zeros(5, 5)
    del state["card"]
    torch.save(state, tmp_path / "resized.pt")
    with pytest.raises(UserError, match="does not match"):
        load_model(tmp_path / "resized.pt", card)
    with pytest.raises(UserError, match="no checkpoint"):
        load_model(tmp_path / "absent.pt", card)


# --- the command -------------------------------------------------------------------------------------

def test_cli_exports_a_run_and_prints_a_summary(tmp_path, quick_exporter) -> None:
    make_run(tmp_path, "r", "mlp")
    result = CliRunner().invoke(app, ["export", "--run", "r", "--runs-dir", str(tmp_path), "--eval-samples", "32",
                                      "--seed", "1", "--gpu-variant", "fp32", "--tensorrt",
                                      "--preferred-batch-sizes", "4,8", "--max-batch-size", "8"])
    assert result.exit_code == 0, result.output
    out = result.output.replace("\n", "")  # rich wraps long paths at the terminal width
    assert "int8" in out and "fp16" in out and "model_repository" in out
    gpu = text_format.Parse((tmp_path / "r/model_repository/mlp_gpu/config.pbtxt").read_text(), pb.ModelConfig())
    assert list(gpu.dynamic_batching.preferred_batch_size) == [4, 8]
    assert gpu.optimization.execution_accelerators.gpu_execution_accelerator[0].name == "tensorrt"
    assert (tmp_path / "r/model_repository/mlp_gpu/1/model.onnx").read_bytes() == \
        (tmp_path / "r/export/model.onnx").read_bytes()
    assert_documented_artifacts("export", tmp_path / "r")


@pytest.mark.parametrize("args, message", [
    (["--run", "missing"], "run 'missing' not found"),
    (["--run", "r", "--card", "{other}/train/model.json", "--checkpoint", "{run}/train/checkpoint.pt"], "was trained as mlp"),
    (["--run", "r", "--preferred-batch-sizes", "4,x"], "--preferred-batch-sizes"),
    (["--run", "r", "--max-batch-size", "8", "--preferred-batch-sizes", "16"], "preferred_batch_sizes=[16] is invalid"),
])
def test_cli_bad_input_is_one_sentence_and_exit_1(tmp_path, args, message) -> None:
    run, other = make_run(tmp_path, "r", "mlp"), make_run(tmp_path, "other", "cnn")
    args = [a.format(run=run, other=other) for a in args]
    result = CliRunner().invoke(app, ["export", "--runs-dir", str(tmp_path), *args])
    assert result.exit_code == 1
    assert message in result.output and "Traceback" not in result.output
    assert not (run / "model_repository").exists() and not (run / "export").exists()


def test_a_variant_not_among_the_choices_is_refused_by_the_command_line(tmp_path) -> None:
    run = make_run(tmp_path, "r", "mlp")
    result = CliRunner().invoke(app, ["export", "--runs-dir", str(tmp_path), "--run", "r", "--cpu-variant", "fp16"])
    assert result.exit_code == 2  # typer's usage error, listing the choices (also in --help)
    text = " ".join(result.output.replace("│", " ").split())  # unwrapped from its box
    assert "'fp16' is not one of 'fp32', 'int8'" in text and "Traceback" not in text
    assert not (run / "model_repository").exists() and not (run / "export").exists()
