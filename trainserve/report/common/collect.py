"""Find every profile record of a run (docs/architecture.md: a JSON object with "schema_version" and "phase").

Records are read from `train/`, `compare/`, `load/`, `limits/` and `sweep/` of the run folder, recursively.
A file that is not a record (Locust CSV stats, history.json, speedup.json, a sweep's index.json) is skipped
silently; a record that cannot be read is skipped and reported, so one bad file never hides the others.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainserve.core.errors import UserError
from trainserve.core.profile import ProfileRecord

log = logging.getLogger(__name__)

RECORD_FOLDERS = ("train", "compare", "load", "limits", "sweep")  # limits/: in-process records (trainserve limits)


@dataclass
class Entry:
    """One profile record and where it came from (path relative to the run folder)."""

    source: str
    record: ProfileRecord


@dataclass
class Collection:
    run: str
    run_dir: Path
    entries: list[Entry]
    problems: list[tuple[str, str]] = field(default_factory=list)  # (file, why) for files skipped as unreadable
    card: dict[str, Any] | None = None  # train/model.json, when present


def collect(run_dir: Path) -> Collection:
    """Every readable profile record under the run folder, sorted by source path."""
    if not run_dir.is_dir():
        raise UserError(f"run folder {run_dir} does not exist; run `trainserve run` or the stages first, "
                        "or pass the right --run/--runs-dir")
    entries: list[Entry] = []
    problems: list[tuple[str, str]] = []
    for folder in RECORD_FOLDERS:
        base = run_dir / folder
        if not base.is_dir():
            continue
        for path in sorted(base.rglob("*.json")):
            if path.name.startswith("."):  # a temporary file of an atomic write in progress
                continue
            rel = path.relative_to(run_dir).as_posix()
            try:
                data = json.loads(path.read_text())
            except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
                problems.append((rel, f"unreadable JSON ({e}); skipped"))
                continue
            if not (isinstance(data, dict) and "schema_version" in data and "phase" in data):
                continue
            try:
                record = ProfileRecord.from_dict(data)
            except (UserError, TypeError) as e:
                problems.append((rel, f"not a usable profile record ({e}); skipped"))
                continue
            if record.phase not in ("train", "infer") or record.device not in ("cpu", "cuda"):
                problems.append((rel, f"unknown phase {record.phase!r} or device {record.device!r}; skipped"))
                continue
            entries.append(Entry(rel, record))
    for rel, why in problems:
        log.warning("%s: %s", rel, why)
    return Collection(run=run_dir.name, run_dir=run_dir, entries=entries, problems=problems,
                      card=_read_card(run_dir / "train" / "model.json"))


def _read_card(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    return data if isinstance(data, dict) else None
