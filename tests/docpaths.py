"""What docs/architecture.md names: the repository paths and modules it points to, and the artifacts each
command writes under runs/<run>/ (its "Artifacts between stages" table).

tests/test_architecture_doc.py checks the names against the tree; each stage's own test that runs the real
command calls `assert_documented_artifacts`, so a path the document gives and the code does not write fails
where that command is tested.
"""

from __future__ import annotations

import re
from pathlib import Path

from tests.conftest import REPO_ROOT

DOC = REPO_ROOT / "docs" / "architecture.md"
ROW = re.compile(r"^\| `trainserve (\w+)`")
TICKED = re.compile(r"`([^`]+)`")


def expand(pattern: str) -> list[str]:
    """Brace expansion: `a/{b, c/d}` -> `a/b`, `a/c/d` (the document's shorthand; nested braces are not used)."""
    m = re.search(r"\{([^{}]*)\}", pattern)
    if m is None:
        return [pattern]
    head, tail = pattern[:m.start()], pattern[m.end():]
    return [p for alt in m.group(1).split(",") for p in expand(head + alt.strip() + tail)]


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def artifact_cases(text: str | None = None) -> dict[str, list[list[str]]]:
    """{command: [[artifact path patterns relative to runs/<run>/], ...]}: the backticked paths of the table's
    last column, one list per case where the cell gives alternatives ("...; or with `--no-sweep`, ...").
    Options such as `--no-sweep` are not paths."""
    rows = {}
    for line in (DOC.read_text() if text is None else text).splitlines():
        m = ROW.match(line)
        if m:
            cases = _cells(line)[-1].split("; or ")
            rows[m.group(1)] = [[p for t in TICKED.findall(c) if not t.startswith("-") for p in expand(t)]
                                for c in cases]
    return rows


def artifact_rows(text: str | None = None) -> dict[str, list[str]]:
    """{command: every artifact path pattern of its row, all cases together}."""
    return {c: [p for case in cases for p in case] for c, cases in artifact_cases(text).items()}


def prose(text: str | None = None) -> str:
    """The document without its drawings (fenced blocks) and the table's "writes" cells (run artifacts, not
    repository paths)."""
    text = re.sub(r"^```.*?^```", "", DOC.read_text() if text is None else text, flags=re.S | re.M)
    return "\n".join(" | ".join(_cells(line)[:-1]) if ROW.match(line) else line for line in text.splitlines())


def assert_documented_artifacts(command: str, run_dir: Path, case: int = 0) -> None:
    """Every artifact the document says `trainserve <command>` writes (in the row's `case`-th alternative) is
    in `run_dir`; placeholders such as <model> match any name."""
    patterns = artifact_cases()[command][case]
    assert patterns, f"docs/architecture.md names no artifact for trainserve {command}"
    for pattern in patterns:
        glob = re.sub(r"<[^>]+>", "*", pattern).rstrip("/")
        assert any(run_dir.glob(glob)), (
            f"docs/architecture.md says trainserve {command} writes runs/<run>/{pattern}; {run_dir} has none: "
            f"{sorted(str(p.relative_to(run_dir)) for p in run_dir.rglob('*'))[:40]}")
