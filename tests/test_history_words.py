"""Comments and docstrings in product code say why, never when, after which issue or on which host: history
lives in git and in the benchmarks' result files (STYLE.md items 17-18)."""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

from tests.conftest import REPO_ROOT

# trainserve/{train,serve,loadtest} are links to the top-level folders: each file is read once, by its real path.
PRODUCT_ROOTS = ("trainserve", "train", "serve", "loadtest")

HISTORY = [re.compile(p, re.IGNORECASE) for p in (
    r"\bissue #?\d+",
    r"\bitem \d+\b",
    r"\bstop \d+\b",
    r"\bround \d+\b",
    r"\b20\d\d-\d\d-\d\d\b",
    r"\bon the H[12]00 host",
    r"\bH[12]00 (?:host|machine|example)\b",
    r"\bas before\b",
    r"\bpreviously\b",
    r"(?<!is )(?<!are )(?<!be )\bused to\b",
    r"\bthe same day\b",
)]


def product_files() -> list[Path]:
    seen: dict[Path, Path] = {}
    for root in PRODUCT_ROOTS:
        for path in sorted((REPO_ROOT / root).rglob("*.py")):
            seen.setdefault(path.resolve(), path)
    return sorted(seen)


def prose(source: str) -> list[tuple[int, str]]:
    """(line, text) of every comment and docstring (a string standing alone as a statement) in `source`."""
    found = [(tok.start[0], tok.string) for tok in tokenize.generate_tokens(io.StringIO(source).readline)
             if tok.type == tokenize.COMMENT]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            # a docstring's words may break across lines: judge it as one line of text
            found.append((node.lineno, " ".join(node.value.value.split())))
    return found


def history_in(source: str) -> list[tuple[int, str]]:
    return [(line, m.group(0)) for line, text in prose(source) for pattern in HISTORY
            if (m := pattern.search(text))]


def test_the_scan_reads_the_product_tree_once():
    files = product_files()
    assert len(files) > 100, f"only {len(files)} files: the scan no longer finds the product code"
    assert len({p.name for p in files if p.name != "__init__.py"}) > 50
    assert REPO_ROOT.joinpath("serve").resolve() in {p.parent for p in files}


# the kinds of history a comment must not narrate, one comment each in the sample below (built, not written out,
# so this file holds no such comment itself)
NARRATED = {"issue 27": "since issue 27 item 3", "on the H200 host": "on the H200 host it took 2 ms",
            "2026-12-06": "measured 2026-12-06", "used to": "it used to copy", "as before": "as before, it joins"}


def test_the_patterns_catch_history_and_pass_reasons():
    texts = list(NARRATED.values())
    flagged = history_in(f'"""Bounded {texts[0]}."""\n' + "".join(f"x{i} = {i}  # {t}\n" for i, t in enumerate(texts[1:])))
    assert {word for _, word in flagged} >= set(NARRATED)  # the first sample sits in a docstring
    assert not history_in('"""The queue is bounded so a burst cannot hold every request in memory."""\n'
                          "z = 3  # the buffer is used to read the frame\n"
                          "price = ('H100', 'retrieved 2026-11-09')  # a price's source date is data, not history\n")


def test_no_history_in_product_comments_or_docstrings():
    found = [f"{path.relative_to(REPO_ROOT)}:{line}: {word!r}"
             for path in product_files() for line, word in history_in(path.read_text())]
    assert not found, ("comments say why, not when, after which issue or on which host "
                       "(history lives in git and in the benchmarks' result files):\n" + "\n".join(found))
