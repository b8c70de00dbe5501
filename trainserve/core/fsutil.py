"""Writing artifacts so that a crash or a mistake never leaves a half-written file or folder."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


# tempfile makes files 0600 and folders 0700; artifacts get the modes a plain open()/mkdir() would give, so
# another user (a Triton container, a colleague) can read a model repository where the umask allows it
FILE_MODE = 0o666 & ~_umask()
DIR_MODE = 0o777 & ~_umask()


def write_text_atomic(path: Path, text: str) -> None:
    """Write to a temporary name in the same folder, then rename over `path`."""
    _write_atomic(path, text, "w")


def write_bytes_atomic(path: Path, data: bytes) -> None:
    """`write_text_atomic` for bytes (a PNG)."""
    _write_atomic(path, data, "wb")


def _write_atomic(path: Path, data: str | bytes, mode: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, FILE_MODE)
        with os.fdopen(fd, mode) as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def write_json_atomic(path: Path, data: Any) -> None:
    write_text_atomic(path, json.dumps(data, indent=2, sort_keys=False, default=_json_default) + "\n")


def _json_default(o: Any) -> Any:
    if isinstance(o, Path):
        return str(o)
    if hasattr(o, "item"):  # numpy / torch scalars
        return o.item()
    raise TypeError(f"{type(o).__name__} is not JSON serialisable")


@contextlib.contextmanager
def staged_dir(final: Path) -> Iterator[Path]:
    """Yield a temporary sibling folder; on success it replaces `final`, on error it is removed.

    Whatever was at `final` before stays untouched until the new folder is complete.
    """
    final.parent.mkdir(parents=True, exist_ok=True)
    # a stage killed midway (SIGKILL, or SIGTERM before Python could unwind) leaves its staging folder;
    # one writer per run and folder, so any such sibling is stale
    for stale in final.parent.glob(f".{final.name}.*.tmp"):
        shutil.rmtree(stale, ignore_errors=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", suffix=".tmp", dir=final.parent))
    tmp.chmod(DIR_MODE)
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    old = None
    if final.exists():
        old = final.with_name(f".{final.name}.old")
        shutil.rmtree(old, ignore_errors=True)
        os.replace(final, old)
    os.replace(tmp, final)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
