"""The version of trainserve: the installed distribution's metadata (pyproject.toml's `version`), or, for a
source tree run without installing it (PYTHONPATH, a device machine's copy), the checkout's commit."""

from __future__ import annotations

import functools
import subprocess
from importlib import metadata
from pathlib import Path

# neither installed nor in a git checkout: nothing says which code ran
UNINSTALLED = "0+unknown"


@functools.cache
def version() -> str:
    """pyproject.toml's version as installed; else 0+g<commit>[.dirty] from the checkout; else the source tree's
    pyproject.toml version marked +source (a copy without .git); else UNINSTALLED."""
    try:
        return metadata.version("trainserve")
    except metadata.PackageNotFoundError:
        return _from_git() or _from_pyproject() or UNINSTALLED


def _from_git() -> str | None:
    """A local version label (PEP 440) naming the checkout's commit, as `git describe` sees it."""
    root = Path(__file__).resolve().parents[2]
    try:
        out = subprocess.run(["git", "-C", str(root), "describe", "--always", "--dirty=.dirty", "--abbrev=12"],
                             capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    described = out.stdout.strip()
    return f"0+g{described}" if out.returncode == 0 and described else None


def _from_pyproject() -> str | None:
    import tomllib

    path = Path(__file__).resolve().parents[2] / "pyproject.toml"
    try:
        v = tomllib.loads(path.read_text()).get("project", {}).get("version")
    except (OSError, tomllib.TOMLDecodeError):
        return None
    return f"{v}+source" if isinstance(v, str) and v else None
