"""The layering in pyproject.toml ([tool.importlinter]) holds: lint-imports passes, and it does fail on a breach."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]


def _lint_imports(cwd: Path) -> subprocess.CompletedProcess[str]:
    exe = Path(sys.executable).with_name("lint-imports")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "importlinter.cli"]
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=120,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(cwd)})


def test_contracts_kept() -> None:
    done = _lint_imports(REPO_ROOT)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "0 broken" in done.stdout


def _copy_tree(tmp_path: Path) -> Path:
    """The packages and pyproject in a scratch folder (the links trainserve/{train,serve,loadtest} kept)."""
    root = tmp_path / "repo"
    root.mkdir()
    shutil.copy(REPO_ROOT / "pyproject.toml", root)
    for name in ("trainserve", "train", "serve", "loadtest"):
        shutil.copytree(REPO_ROOT / name, root / name, symlinks=True,
                        ignore=shutil.ignore_patterns("__pycache__"))
    return root


def test_a_stage_importing_another_stage_breaks_the_layers(tmp_path: Path) -> None:
    root = _copy_tree(tmp_path)
    (root / "serve" / "leak.py").write_text("from trainserve.train import config\n")
    done = _lint_imports(root)
    assert done.returncode != 0
    assert "trainserve.serve.leak" in done.stdout and "trainserve.train.config" in done.stdout


def test_a_cycle_breaks_the_contract(tmp_path: Path) -> None:
    root = _copy_tree(tmp_path)
    (root / "trainserve" / "core" / "a_cycle.py").write_text("from trainserve.core import b_cycle\n")
    (root / "trainserve" / "core" / "b_cycle.py").write_text("from trainserve.core import a_cycle\n")
    done = _lint_imports(root)
    assert done.returncode != 0 and "a_cycle" in done.stdout, done.stdout[-2000:]


def test_the_model_layer_importing_a_protocol_breaks_the_serve_layers(tmp_path: Path) -> None:
    root = _copy_tree(tmp_path)
    (root / "serve" / "model" / "leak.py").write_text("from trainserve.serve.protocol import kserve\n")
    done = _lint_imports(root)
    assert done.returncode != 0
    assert "trainserve.serve.model.leak" in done.stdout and "trainserve.serve.protocol.kserve" in done.stdout


def test_a_protocol_importing_a_session_breaks_the_serve_contract(tmp_path: Path) -> None:
    root = _copy_tree(tmp_path)
    (root / "serve" / "protocol" / "leak.py").write_text("from trainserve.serve.model import sessions\n")
    done = _lint_imports(root)
    assert done.returncode != 0
    assert "trainserve.serve.protocol.leak" in done.stdout and "trainserve.serve.model.sessions" in done.stdout
    assert "a protocol module never imports the model layer" in done.stdout.replace("\n", " ")


def test_a_section_importing_another_section_breaks_the_report_layers(tmp_path: Path) -> None:
    root = _copy_tree(tmp_path)
    (root / "trainserve" / "report" / "diff" / "leak.py").write_text(
        "from trainserve.report.memory import memory_compare\n")
    done = _lint_imports(root)
    assert done.returncode != 0
    assert "trainserve.report.diff.leak" in done.stdout and "trainserve.report.memory.memory_compare" in done.stdout


def test_the_shared_report_modules_importing_a_section_breaks_the_report_layers(tmp_path: Path) -> None:
    root = _copy_tree(tmp_path)
    (root / "trainserve" / "report" / "common" / "leak.py").write_text(
        "from trainserve.report.cost import cost_per_million\n")
    done = _lint_imports(root)
    assert done.returncode != 0
    assert "trainserve.report.common.leak" in done.stdout and "trainserve.report.cost.cost_per_million" in done.stdout
