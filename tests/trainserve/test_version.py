"""trainserve's version: installed metadata, else the checkout's commit, else the source tree's pyproject.toml."""

from __future__ import annotations

from importlib import metadata

from trainserve.core import version


def _uninstalled(monkeypatch):
    def missing(name):
        raise metadata.PackageNotFoundError(name)
    monkeypatch.setattr(version.metadata, "version", missing)
    version.version.cache_clear()


def test_a_source_tree_names_its_commit(monkeypatch):
    _uninstalled(monkeypatch)
    try:
        v = version.version()
    finally:
        version.version.cache_clear()
    assert v.startswith("0+g") and v != version.UNINSTALLED  # the repository is a git checkout


def test_a_copy_without_git_names_its_pyproject_version(monkeypatch):
    _uninstalled(monkeypatch)
    monkeypatch.setattr(version, "_from_git", lambda: None)
    try:
        v = version.version()
    finally:
        version.version.cache_clear()
    assert v.endswith("+source") and v.split("+")[0].count(".") == 2
