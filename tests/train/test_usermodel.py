"""A model of the user's own (train/usermodel.py): the sentence for each thing that cannot work, given by
`trainserve run` before any stage, and the config, card and data that carry the model through the stages."""

from __future__ import annotations

import json
import textwrap

import numpy as np
import pytest
from typer.testing import CliRunner

from trainserve.cli import app
from trainserve.core.errors import UserError
from trainserve.train import usermodel
from trainserve.train.config import TrainConfig
from trainserve.train.data import load_splits
from trainserve.train.usercheck import model_config

runner = CliRunner()

HEADER = "import torch\nfrom torch import nn\n\n"
LINEAR = HEADER + textwrap.dedent("""
    class Net(nn.Module):
        def __init__(self, num_classes=3):
            super().__init__()
            self.fc = nn.Linear(8, num_classes)

        def forward(self, x):
            return self.fc(x)
    """)


def _file(tmp_path, body: str, name: str = "mymodel.py"):
    path = tmp_path / "elsewhere" / name  # outside the repository, as a user's file is
    path.parent.mkdir(exist_ok=True)
    path.write_text(body)
    return path


def _run(tmp_path, model: str, *args: str):
    return runner.invoke(app, ["run", "--quick", "--device", "cpu", "--run", "R", "--runs-dir", str(tmp_path / "runs"),
                               "--model", model, *args])


BAD = {
    "missing file": (None, "8", "does not exist"),
    "no such function": (LINEAR + "\ndef make():\n    return Net()\n", "8", "defines no function 'build'"),
    "not a Module": (LINEAR + "\ndef build():\n    return {'fc': Net()}\n", "8", "returned dict, not a torch.nn.Module"),
    "not (batch, K) logits": (LINEAR + "\nclass Flat(Net):\n    def forward(self, x):\n        return self.fc(x).sum(1)\n"
                              "\ndef build():\n    return Flat()\n", "8", "it must return (batch, K) float logits"),
    "shape does not fit": (LINEAR + "\ndef build():\n    return Net()\n", "5", "--input-shape 5 (float32) does not fit"),
    "not exportable": (LINEAR + "\nclass Cum(Net):\n    def forward(self, x):\n        return torch.cummax(self.fc(x), 1).values\n"
                       "\ndef build():\n    return Cum()\n", "8", "cannot convert the operator aten::cummax"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_each_model_that_cannot_work_is_one_sentence_before_any_stage(tmp_path, case):
    body, shape, sentence = BAD[case]
    path = tmp_path / "elsewhere" / "absent.py" if body is None else _file(tmp_path, body)
    result = _run(tmp_path, f"{path}:build", "--input-shape", shape)
    assert result.exit_code == 1, result.output
    lines = [ln for ln in result.output.splitlines() if ln.strip() and not ln.startswith("… check")]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.output
    assert sentence in lines[0] and "Traceback" not in result.output
    assert not (tmp_path / "runs" / "R" / "logs").exists()  # no stage ran


def test_wrong_num_classes_and_zoo_options_are_refused(tmp_path):
    path = _file(tmp_path, LINEAR + "\ndef build():\n    return Net()\n")
    result = _run(tmp_path, f"{path}:build", "--input-shape", "8", "--num-classes", "5")
    assert result.exit_code == 1 and "outputs 3 classes per sample but --num-classes is 5" in result.output
    result = _run(tmp_path, "cnn", "--input-shape", "3,32,32")
    assert result.exit_code == 1 and "describe a model of your own" in result.output
    result = _run(tmp_path, "resnet")
    assert result.exit_code == 1 and "neither a zoo family" in result.output


def test_config_records_the_reference_and_hash_and_a_changed_file_is_refused(tmp_path, monkeypatch):
    path = _file(tmp_path, LINEAR + "\ndef build(num_classes):\n    return Net(num_classes)\n", name="net-v2.py")
    monkeypatch.chdir(tmp_path)  # a relative reference becomes an absolute one
    cfg = model_config(TrainConfig(model="elsewhere/net-v2.py:build", input_shape=(8,), num_classes=4))
    assert cfg.reference == f"{path}:build" and cfg.name == "net_v2" and cfg.num_classes == 4
    assert cfg.sha256 == usermodel.file_sha256(path)
    assert usermodel.build(cfg)(usermodel.example_batch(cfg)).shape == (2, 4)  # num_classes passed to build()
    path.write_text(path.read_text() + "\n# edited\n")
    with pytest.raises(UserError, match="changed since this model was trained"):
        usermodel.build(cfg)


def test_a_package_module_reference(tmp_path, monkeypatch):
    pkg = tmp_path / "mypkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "nets.py").write_text(LINEAR + "\ndef small():\n    return Net()\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    cfg = model_config(TrainConfig(model="mypkg.nets:small", input_shape=(8,)))
    assert cfg.name == "nets_small" and cfg.num_classes == 3 and cfg.reference == "mypkg.nets:small"
    with pytest.raises(UserError, match="cannot be found"):
        model_config(TrainConfig(model="mypkg.absent:small", input_shape=(8,)))


def test_synthetic_and_npz_data_take_the_model_s_shape(tmp_path):
    ids = usermodel.UserModelConfig("x.py:build", (4, 6), "int64", vocab_size=40, num_classes=3)
    s = load_splits(ids, "synthetic", 64, 0)
    assert s.x_train.shape == (64, 4, 6) and s.x_train.dtype == np.int64 and s.x_train.max() < 40
    img = usermodel.UserModelConfig("x.py:build", (3, 5, 7), num_classes=4)
    s = load_splits(img, "synthetic", 32, 0)
    assert s.x_train.shape == (32, 3, 5, 7) and s.x_train.dtype == np.float32 and s.y_train.max() < 4
    npz = tmp_path / "d.npz"
    np.savez(npz, x=np.zeros((10, 3, 5, 5), np.float32), y=np.arange(10) % 4)
    with pytest.raises(UserError, match=r"rows have shape \[3, 5, 5\] but the model takes \[3, 5, 7\]"):
        load_splits(img, str(npz), 0, 0)
    np.savez(npz, x=np.zeros((10, 3, 5, 7), np.float32), y=np.arange(10) % 5)
    with pytest.raises(UserError, match="outputs 4 classes"):
        load_splits(img, str(npz), 0, 0)


def test_npz_gives_the_input_shape_when_the_option_is_left_out(tmp_path):
    path = _file(tmp_path, LINEAR + "\ndef build():\n    return Net()\n")
    npz = tmp_path / "d.npz"
    np.savez(npz, x=np.random.default_rng(0).normal(size=(20, 8)).astype(np.float32), y=np.arange(20) % 3)
    cfg = model_config(TrainConfig(model=f"{path}:build", dataset=str(npz)))
    assert cfg.input_shape == (8,)
    with pytest.raises(UserError, match="needs --input-shape"):
        model_config(TrainConfig(model=f"{path}:build"))


def test_train_writes_a_card_that_names_the_model(tmp_path):
    path = _file(tmp_path, LINEAR + "\ndef build():\n    return Net()\n")
    result = runner.invoke(app, ["train", "--model", f"{path}:build", "--input-shape", "8", "--device", "cpu",
                                 "--samples", "64", "--batch-size", "16", "--epochs", "1", "--run", "T",
                                 "--runs-dir", str(tmp_path / "runs")])
    assert result.exit_code == 0, result.output
    card = json.loads((tmp_path / "runs/T/train/model.json").read_text())
    assert card["family"] == "user" and card["preset"] is None
    assert card["config"]["reference"] == f"{path}:build" and card["config"]["name"] == "mymodel"
    assert card["config"]["sha256"] == usermodel.file_sha256(path)
    assert card["inputs"] == [{"name": "input", "shape": [8], "dtype": "float32"}] and len(card["classes"]) == 3
    profile = json.loads((tmp_path / "runs/T/train/profile.json").read_text())
    assert profile["model"] == "mymodel" and profile["speed"]["flops_per_sample"] > 0  # counted by torch


def test_the_example_in_examples_builds_and_runs_one_batch():
    from tests.conftest import REPO_ROOT

    cfg = model_config(TrainConfig(model=str(REPO_ROOT / "examples" / "resnet_small.py") + ":build",
                                   input_shape=(3, 64, 64), num_classes=10))
    assert cfg.name == "resnet_small" and cfg.num_classes == 10 and cfg.input_shape == (3, 64, 64)


def test_without_num_classes_the_function_s_own_default_decides(tmp_path):
    path = _file(tmp_path, LINEAR + "\ndef build(num_classes=6):\n    return Net(num_classes)\n")
    cfg = model_config(TrainConfig(model=f"{path}:build", input_shape=(8,)))
    assert cfg.num_classes == 6 and usermodel.build(cfg)(usermodel.example_batch(cfg)).shape == (2, 6)
