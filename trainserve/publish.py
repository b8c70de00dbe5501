"""Export a trained run and publish it as a Triton model repository.

The one place where the training stage's output (verified ONNX variants and the model card) meets the
serving stage's input (config.pbtxt + model files): `train/` exports and verifies, `serve/` writes the
repository, and neither imports the other.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from trainserve.serve.repository import (
    RepositoryConfig,
    model_config_from_card,
    nobatch_config,
    write_repository,
)
from trainserve.core.errors import UserError
from trainserve.core.fsutil import staged_dir, write_json_atomic
from trainserve.train.export import EXPORT_SCHEMA_VERSION, FP32_FILE, ExportConfig, ExportResult, export_run
from trainserve.train.onnx_only import card_from_onnx


def export_and_publish(run_folder: Path, checkpoint: Path, card_path: Path | None, cfg: ExportConfig,
                       repo_cfg: RepositoryConfig,
                       progress: Callable[[str], None] = lambda step: None) -> ExportResult:
    """Export and verify a run, then write runs/RUN/model_repository/ (only when every variant verified)."""
    notes = {"repository": asdict(repo_cfg)}
    result = export_run(run_folder, checkpoint, card_path, cfg, notes=notes, progress=progress)
    progress("writing model repository")
    assert result.card is not None
    chosen = {"cpu": repo_cfg.cpu_variant, "gpu": repo_cfg.gpu_variant}
    entries = [(model_config_from_card(result.card, kind, repo_cfg), result.variant_file(variant))
               for kind, variant in chosen.items()]
    result.repository = write_repository(run_folder / "model_repository", with_nobatch(entries))
    return result



def publish_onnx(run_folder: Path, onnx_path: Path, repo_cfg: RepositoryConfig) -> Path:
    """A model trained elsewhere: its card (train/model.json), export/model.onnx and the model repository.

    The file is served as it is (fp32) on both devices: there is no PyTorch model to verify an fp16
    or int8 conversion against.
    """
    import shutil

    if (run_folder / "train" / "checkpoint.pt").exists():  # its card would no longer describe its checkpoint
        raise UserError(f"run {run_folder.name!r} has a model trained here; publish the ONNX file into another --run")
    card = card_from_onnx(onnx_path)
    (run_folder / "train").mkdir(parents=True, exist_ok=True)
    card.save(run_folder / "train")
    with staged_dir(run_folder / "export") as stage:
        shutil.copyfile(card.config["file"], stage / FP32_FILE)
        write_json_atomic(stage / "export.json", {
            "schema_version": EXPORT_SCHEMA_VERSION, "model": card.name, "family": card.family, "preset": None,
            "exporter": "none: trained elsewhere", "source": card.config["file"], "sha256": card.config["sha256"],
            "variants": {"fp32": {"file": FP32_FILE, "bytes": (stage / FP32_FILE).stat().st_size}},
            "repository": asdict(repo_cfg)})
    entries = [(model_config_from_card(card, kind, repo_cfg), run_folder / "export" / FP32_FILE)
               for kind in ("cpu", "gpu")]
    return write_repository(run_folder / "model_repository", with_nobatch(entries))


def with_nobatch(entries: list[tuple[Any, Path]]) -> list[tuple[Any, Path]]:
    """Each model, and beside it the same file with batching off (`<name>_nobatch`): what `trainserve run`
    measures dynamic batching against."""
    return [*entries, *((nobatch_config(config), path) for config, path in entries)]
