"""Artifacts: written whole or not at all, with the modes the umask gives, under run names that are exact."""

from __future__ import annotations

import os
import stat

import pytest

from trainserve.core.errors import UserError
from trainserve.core.fsutil import staged_dir, write_json_atomic
from trainserve.core.runs import run_dir


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_artifacts_get_the_umask_modes_not_the_temporary_ones(tmp_path):
    # mkstemp/mkdtemp make 0600 files and 0700 folders: a Triton container running as another user could
    # not read a model repository written so
    write_json_atomic(tmp_path / "a" / "record.json", {"x": 1})
    with staged_dir(tmp_path / "repo") as tmp:
        (tmp / "config.pbtxt").write_text("x")
    assert stat.S_IMODE((tmp_path / "a" / "record.json").stat().st_mode) == 0o666 & ~_umask()
    assert stat.S_IMODE((tmp_path / "repo").stat().st_mode) == 0o777 & ~_umask()


@pytest.mark.parametrize("name", ["run1\n", "run1 ", "../x", ".hidden", ""])
def test_a_run_name_must_match_whole(name):
    with pytest.raises(UserError, match="is invalid"):
        run_dir(name)


def test_a_good_run_name_is_a_folder_of_the_runs_dir(tmp_path):
    assert run_dir("run-20261203.a_1", tmp_path) == tmp_path / "run-20261203.a_1"


def test_a_staging_folder_left_by_a_killed_stage_is_removed_by_the_next(tmp_path):
    stale = tmp_path / ".export.k2x9q1.tmp"  # what a stage killed midway leaves
    (stale / "model.onnx").parent.mkdir(parents=True)
    (stale / "model.onnx").write_bytes(b"half a model")
    other = tmp_path / ".model_repository.abc.tmp"  # another folder's staging: left alone
    other.mkdir()
    with staged_dir(tmp_path / "export") as tmp:
        (tmp / "export.json").write_text("{}")
    assert sorted(p.name for p in tmp_path.iterdir()) == [".model_repository.abc.tmp", "export"]
