"""A file's name says what it holds, once: no two product modules share a base name, so a path in a traceback,
a grep or a review names one file."""

from __future__ import annotations

from collections import defaultdict

from tests.conftest import REPO_ROOT
from tests.test_history_words import product_files


def _folders_by_name() -> dict[str, set[str]]:
    found: dict[str, set[str]] = defaultdict(set)
    for path in product_files():
        if path.name != "__init__.py":
            found[path.name].add(str(path.parent.relative_to(REPO_ROOT)))
    return found


def test_no_two_product_files_share_a_name():
    shared = {name: sorted(folders) for name, folders in _folders_by_name().items() if len(folders) > 1}
    assert not shared, f"file names shared by several folders; give each a name saying what it holds: {shared}"

