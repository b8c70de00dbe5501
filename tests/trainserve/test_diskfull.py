"""A full disk during `trainserve train` (the checkpoint save) and `trainserve export` (the fp16/int8 variants):
one sentence on stderr, exit 1, no traceback. The disk is a real tmpfs of a few KiB, so the
write fails with the kernel's own ENOSPC; mounting needs root, elsewhere these tests skip."""

from __future__ import annotations

import errno
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import subprocess_env, trainserve_cmd
from trainserve.core import diskfull

TRAIN = ("train", "--model", "mlp", "--preset", "tiny", "--samples", "64", "--epochs", "1", "--batch-size", "32",
         "--device", "cpu", "--run", "r")


def _tmpfs(path: Path, kib: int):
    path.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={kib}k", "tmpfs", str(path)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {done.stderr.decode().strip()}")


def _umount(path: Path) -> None:
    subprocess.run(["umount", str(path)], check=False)


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(trainserve_cmd(*args), env=subprocess_env(), capture_output=True, text=True, timeout=300)


def _one_sentence(done: subprocess.CompletedProcess) -> None:
    assert done.returncode == 1, done.stderr[-2000:]
    assert "Traceback" not in done.stderr, done.stderr[-2000:]
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "the disk is full" in errors[0] and "run the command again" in errors[0], done.stderr


@pytest.mark.slow
def test_a_full_disk_in_train_and_export_is_one_sentence(tmp_path):
    disk = tmp_path / "disk"
    _tmpfs(disk, 24)  # the model card and profile fit, the checkpoint (~28 KiB) does not
    try:
        _one_sentence(_run(*TRAIN, "--runs-dir", str(disk)))
    finally:
        _umount(disk)
    normal = tmp_path / "runs"
    done = _run(*TRAIN, "--runs-dir", str(normal))
    assert done.returncode == 0, done.stderr[-2000:]
    used = sum(f.stat().st_size for f in normal.rglob("*") if f.is_file()) // 1024
    disk2 = tmp_path / "disk2"
    _tmpfs(disk2, used + 48)  # the training run and the fp32 model fit; the variants do not
    try:
        shutil.copytree(normal / "r", disk2 / "r")
        _one_sentence(_run("export", "--run", "r", "--runs-dir", str(disk2), "--eval-samples", "16"))
        assert (disk2 / "r" / "train" / "checkpoint.pt").stat().st_size > 0  # what was there before is intact
    finally:
        _umount(disk2)


def test_the_disk_full_error_is_found_behind_torch_s_runtime_error():
    try:
        try:
            raise OSError(errno.ENOSPC, "No space left on device")
        except OSError:
            raise RuntimeError("[enforce fail at inline_container.cc] unexpected pos 704 vs 598")  # torch.save's
    except RuntimeError as e:
        sentence = diskfull.as_user_error(e)
    assert sentence is not None and str(sentence).startswith("the disk is full:")
    assert diskfull.as_user_error(RuntimeError("something else")) is None
    assert diskfull.as_user_error(OSError(errno.EACCES, "Permission denied")) is None
