"""A full disk (ENOSPC, or a quota: EDQUOT) while a command writes its artifacts: one sentence, not a traceback.

Every artifact is written to a temporary name and renamed into place (core.fsutil, train.checkpoint), so
what a full disk interrupts is only the file being written; what was there before is intact. torch.save
reports the failed write as a RuntimeError whose __context__ is the OSError, hence the walk of the chain.
"""

from __future__ import annotations

import errno

from trainserve.core.errors import UserError

DISK_FULL = (errno.ENOSPC, errno.EDQUOT)


def disk_full_error(error: BaseException) -> OSError | None:
    """The OSError saying the disk is full behind `error` (itself, its cause or context), else None."""
    seen: set[int] = set()
    e: BaseException | None = error
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, OSError) and e.errno in DISK_FULL:
            return e
        e = e.__cause__ or e.__context__
    return None


def as_user_error(error: BaseException) -> UserError | None:
    """The one sentence for a command that ran out of disk, or None when `error` is something else."""
    full = disk_full_error(error)
    if full is None:
        return None
    where = f" while writing {full.filename}" if full.filename else ""
    what = "the disk quota is used up" if full.errno == errno.EDQUOT else "the disk is full"
    return UserError(f"{what}{where}: free some space (or pass another --runs-dir) and run the command again, "
                     "which writes that file anew; the files written before it are intact")


def nearly_full(folder, below_bytes: int = 1 << 20) -> bool:
    """True when the disk holding `folder` has less than below_bytes free: for writers that truncate a file
    silently on a full disk (torch's TorchScript ONNX exporter), to name the cause of the broken file."""
    import shutil

    try:
        return shutil.disk_usage(folder).free < below_bytes
    except OSError:
        return False


class blames_a_full_disk:  # noqa: N801 - used as a context manager, named for how it reads
    """`with blames_a_full_disk(path):` turns any error into ENOSPC for `path` when its disk is nearly full: for
    tools that write a truncated file without a word and then fail reading it back (onnx's shape inference
    inside onnxruntime's quantizer, torch's TorchScript exporter)."""

    def __init__(self, path) -> None:
        self.path = path

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind, error, tb) -> bool:
        from pathlib import Path

        if isinstance(error, Exception) and disk_full_error(error) is None and nearly_full(Path(self.path).parent):
            raise OSError(errno.ENOSPC, "No space left on device", str(self.path)) from None
        return False
