"""docs/architecture.md names what exists: repository paths, modules and commands (its artifact paths are
checked where each command is tested for real, by tests.docpaths.assert_documented_artifacts)."""

from __future__ import annotations

import importlib.util
import re

from tests.conftest import REPO_ROOT
from tests.docpaths import DOC, TICKED, artifact_rows, expand, prose
from trainserve.cli import app

SOURCE_SUFFIXES = (".py", ".toml", ".md", ".yaml", ".sh", ".pbtxt")


def _repo_paths(text: str) -> list[str]:
    """Backticked tokens that name something in the repository: a path under one of its top-level entries."""
    top = {p.name for p in REPO_ROOT.iterdir() if not p.name.startswith(".")}
    found = []
    for token in TICKED.findall(text):
        for path in expand(token):
            path = path.split("::")[0]
            if " " in path or "<" in path or "*" in path:
                continue
            if ("/" in path or path.endswith(SOURCE_SUFFIXES)) and path.split("/")[0] in top:
                found.append(path)
    return found


def test_every_repository_path_the_document_names_exists():
    paths = _repo_paths(prose())
    assert len(paths) >= 40, f"only {len(paths)} paths found: the parser no longer reads the document"
    missing = sorted({p for p in paths if not (REPO_ROOT / p).exists()})
    assert not missing, f"docs/architecture.md names paths that do not exist: {missing}"


def test_every_module_the_document_names_imports():
    text = DOC.read_text()  # the layer drawing names modules too
    modules = {m.rstrip(".") for m in re.findall(r"\btrainserve(?:\.\w+)+", text)}
    assert {"trainserve.core", "trainserve.report", "trainserve.serve"} <= modules
    missing = sorted(m for m in modules if importlib.util.find_spec(m) is None)
    assert not missing, f"docs/architecture.md names modules that do not exist: {missing}"


def test_the_artifact_table_has_a_row_for_every_command_and_each_is_checked():
    commands = {c.name for c in app.registered_commands}
    rows = artifact_rows()
    assert set(rows) == commands, f"rows for {sorted(rows)}, commands {sorted(commands)}"
    tests = "\n".join(p.read_text() for p in (REPO_ROOT / "tests").rglob("test_*.py"))
    for command, patterns in rows.items():
        if patterns:  # serve and plan write nothing under runs/<run>/
            assert f'assert_documented_artifacts("{command}"' in tests, (
                f"no test runs trainserve {command} and checks the artifacts docs/architecture.md names")


def test_brace_expansion_reads_the_documents_shorthand():
    assert expand("m/<f>_{cpu,gpu}/{config.pbtxt, 1/model.onnx}") == [
        "m/<f>_cpu/config.pbtxt", "m/<f>_cpu/1/model.onnx", "m/<f>_gpu/config.pbtxt", "m/<f>_gpu/1/model.onnx"]
