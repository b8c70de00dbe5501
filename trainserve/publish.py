"""Export a trained run and publish it as a Triton model repository.

The one place where the training stage's output (verified ONNX variants and the model card) meets the
serving stage's input (config.pbtxt + model files): `train/` exports and verifies, `serve/` writes the
repository, and neither imports the other.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

from trainserve.serve.repository import (
    RepositoryConfig,
    model_config_from_card,
    write_repository,
)
from trainserve.train.export import ExportConfig, ExportResult, export_run


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
    result.repository = write_repository(run_folder / "model_repository", entries)
    return result

