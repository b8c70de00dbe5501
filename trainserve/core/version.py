"""The version of trainserve, from the installed distribution's metadata (pyproject.toml's `version`)."""

from __future__ import annotations

from importlib import metadata

# a source tree run without installing it (PYTHONPATH) has no metadata to read
UNINSTALLED = "0+unknown"


def version() -> str:
    """pyproject.toml's version as installed, or UNINSTALLED when trainserve is not installed."""
    try:
        return metadata.version("trainserve")
    except metadata.PackageNotFoundError:
        return UNINSTALLED
