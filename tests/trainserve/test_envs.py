"""trainserve/core/envs.py is the one home of the environment switches: product code reads TRAINSERVE_*
variables only through it, every one it declares is documented, and each reads at the call."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT
from tests.test_history_words import product_files
from trainserve import optiondocs
from trainserve.core import envs

ENVS_PY = REPO_ROOT / "trainserve" / "core" / "envs.py"
NAME = re.compile(r"TRAINSERVE_[A-Z0-9_]+")


def _is_environ(node: ast.AST) -> bool:
    """`os.environ` or `environ` (from os import environ)."""
    return (isinstance(node, ast.Attribute) and node.attr == "environ") or (
        isinstance(node, ast.Name) and node.id == "environ")


def _literal(node: ast.AST | None) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def env_reads(source: str) -> list[tuple[int, str]]:
    """(line, key) of each read of the environment whose key is a TRAINSERVE_ name or not a literal (a name
    held in a constant could be anything): os.environ.get/[...]/`in`, os.getenv."""
    found = []
    for node in ast.walk(ast.parse(source)):
        key: ast.AST | None = None
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args:
            if (node.func.attr in ("get", "pop", "setdefault") and _is_environ(node.func.value)) or (
                    node.func.attr == "getenv"):
                key = node.args[0]
        elif isinstance(node, ast.Subscript) and _is_environ(node.value) and isinstance(node.ctx, ast.Load):
            key = node.slice
        elif isinstance(node, ast.Compare) and any(_is_environ(c) for c in node.comparators):
            key = node.left
        if key is None:
            continue
        text = _literal(key)
        if text is None or NAME.match(text):
            found.append((node.lineno, text if text is not None else ast.unparse(key)))
    return found


def _switch_names_in(source: str) -> set[str]:
    """TRAINSERVE_ names written as whole string constants outside docstrings (a declaration in disguise)."""
    tree = ast.parse(source)
    docstrings = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Expr)}
    return {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
            and id(n) not in docstrings and NAME.fullmatch(n.value)}


def test_the_scan_finds_reads_in_every_spelling():
    source = ("import os\nfrom os import environ\nKEY = 'TRAINSERVE_X'\n"
              "a = os.environ.get('TRAINSERVE_A', '')\nb = os.getenv('TRAINSERVE_B')\nc = os.environ['TRAINSERVE_C']\n"
              "d = 'TRAINSERVE_D' in os.environ\ne = environ.get(KEY)\nf = os.environ.get('CUDA_VISIBLE_DEVICES')\n")
    assert sorted(key for _, key in env_reads(source)) == ["KEY", "TRAINSERVE_A", "TRAINSERVE_B", "TRAINSERVE_C",
                                                           "TRAINSERVE_D"]
    assert _switch_names_in(source) == {"TRAINSERVE_X", "TRAINSERVE_A", "TRAINSERVE_B", "TRAINSERVE_C",
                                        "TRAINSERVE_D"}


def test_product_code_reads_trainserve_variables_only_through_envs():
    reads = [f"{p.relative_to(REPO_ROOT)}:{line}: {key}" for p in product_files() if p != ENVS_PY
             for line, key in env_reads(p.read_text())]
    assert not reads, "read TRAINSERVE_* variables through trainserve/core/envs.py:\n" + "\n".join(reads)
    names = {f"{p.relative_to(REPO_ROOT)}: {sorted(found)}" for p in product_files() if p != ENVS_PY
             if (found := _switch_names_in(p.read_text()))}
    assert not names, "declare environment switches in trainserve/core/envs.py:\n" + "\n".join(sorted(names))


def test_every_name_the_product_mentions_is_declared():
    declared = {s.name for s in envs.SWITCHES}
    mentioned = {name for p in product_files() for name in NAME.findall(p.read_text())}
    assert mentioned <= declared, f"not declared in trainserve/core/envs.py: {sorted(mentioned - declared)}"
    assert len(declared) == len(envs.SWITCHES)
    assert all(s.doc and s.type and NAME.fullmatch(s.name) for s in envs.SWITCHES)


def test_a_switch_reads_at_the_call(monkeypatch):
    monkeypatch.delenv(envs.RUNS.name, raising=False)
    assert envs.RUNS.get() == Path("runs") and not envs.RUNS.is_set()
    monkeypatch.setenv(envs.RUNS.name, "/tmp/elsewhere")
    assert envs.RUNS.get() == Path("/tmp/elsewhere") and envs.RUNS.is_set()
    monkeypatch.setenv(envs.SERVE_MERGE.name, " 0 ")
    assert envs.SERVE_MERGE.get() is False
    monkeypatch.delenv(envs.SERVE_MERGE.name)
    assert envs.SERVE_MERGE.get() is True


@pytest.mark.parametrize("switch", envs.SWITCHES, ids=lambda s: s.name)
def test_docs_options_md_lists_every_switch(switch):
    assert f"`{switch.name}`" in optiondocs.options_md()
