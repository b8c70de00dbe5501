"""A file's name says what it holds, once: no two product modules share a base name (serve/ none at all),
so a path in a traceback, a grep or a review names one file. The pairs still shared are listed here by
name, and the list may only shrink."""

from __future__ import annotations

from collections import defaultdict

from tests.conftest import REPO_ROOT
from tests.test_history_words import product_files

# one module per command under commands/ and one option tree per command under core/options/, plus a few
# stage-and-report pairs: still to be renamed (each entry: the folders that share the name)
STILL_SHARED = {
    "diff.py": {"trainserve/core/options", "trainserve/commands"},
    "export.py": {"trainserve/commands", "train"},
    "frontier.py": {"trainserve/core/options", "trainserve/core", "trainserve/commands", "train"},
    "load.py": {"trainserve/core/options", "trainserve/commands"},
    "run.py": {"trainserve/core/options", "trainserve/commands"},
    "serve.py": {"trainserve/core/options", "trainserve/commands"},
    "train.py": {"trainserve/core/options", "trainserve/commands"},
}


def _folders_by_name() -> dict[str, set[str]]:
    found: dict[str, set[str]] = defaultdict(set)
    for path in product_files():
        if path.name != "__init__.py":
            found[path.name].add(str(path.parent.relative_to(REPO_ROOT)))
    return found


def test_no_new_shared_file_names():
    shared = {name: folders for name, folders in _folders_by_name().items() if len(folders) > 1}
    new = {name: sorted(folders) for name, folders in shared.items()
           if not folders <= STILL_SHARED.get(name, set())}
    assert not new, f"file names shared by several folders; give each a name saying what it holds: {new}"


def test_serve_names_are_unique_across_the_tree():
    names = _folders_by_name()
    clashes = {name: sorted(folders) for name, folders in names.items()
               if len(folders) > 1 and any(f.startswith("serve") for f in folders)}
    assert not clashes, clashes


def test_the_list_of_shared_names_only_shrinks():
    names = _folders_by_name()
    stale = {name for name in STILL_SHARED if len(names.get(name, set())) < 2}
    assert not stale, f"no longer shared: remove from STILL_SHARED: {sorted(stale)}"
