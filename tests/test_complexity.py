"""Product code stays readable in one sitting: no function or method above cyclomatic complexity 25 (radon's
measure, as `radon cc` prints it), no module above 800 lines. Past either, split by job before adding to it."""

from __future__ import annotations

from radon.complexity import cc_visit
from radon.visitors import Function

from tests.conftest import REPO_ROOT
from tests.test_history_words import product_files

MAX_COMPLEXITY = 25  # radon rank D tops out here; E and F read as several functions in one
MAX_LINES = 800


def _functions(code: str) -> list[Function]:
    """Every function and method radon measures (a class's own figure is left out: its methods are measured)."""
    return [block for block in cc_visit(code) if isinstance(block, Function)]


def test_no_function_is_too_complex():
    offenders = []
    for path in product_files():
        for f in _functions(path.read_text()):
            if f.complexity > MAX_COMPLEXITY:
                offenders.append(f"{path.relative_to(REPO_ROOT)}:{f.lineno} {f.fullname} ({f.complexity})")
    assert not offenders, (f"functions above cyclomatic complexity {MAX_COMPLEXITY}; split each by job:\n"
                           + "\n".join(offenders))


def test_no_module_is_too_long():
    offenders = []
    for path in product_files():
        lines = len(path.read_text().splitlines())
        if lines > MAX_LINES:
            offenders.append(f"{path.relative_to(REPO_ROOT)} ({lines} lines)")
    assert not offenders, f"modules above {MAX_LINES} lines; split each by concept:\n" + "\n".join(offenders)
