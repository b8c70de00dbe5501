"""docs/BENCHMARKS.md is what benchmarks/benchmarks_doc.py makes from benchmarks/targets.md and the result
files, and every result file says which machine, command and date its figures belong to."""

from __future__ import annotations

import json
import re

from benchmarks import benchmarks_doc
from tests.conftest import REPO_ROOT

RESULTS = REPO_ROOT / "benchmarks" / "results"


def test_benchmarks_doc_is_generated():
    text = (REPO_ROOT / "docs" / "BENCHMARKS.md").read_text()
    assert benchmarks_doc.render() == text, (
        "docs/BENCHMARKS.md is out of date: python benchmarks/benchmarks_doc.py --write")


def test_every_result_json_has_machine_command_and_date():
    assert list(RESULTS.rglob("*.json")), "no result file under benchmarks/results/"
    assert not benchmarks_doc.missing_provenance(), (
        "result files lacking machine, command or date (python benchmarks/benchmarks_doc.py --stamp FILE ...)")


def test_results_dirs_start_with_their_date():
    """The newest dir is the greatest name: that holds only while every name starts with its date."""
    for d in benchmarks_doc.results_dirs():
        assert re.match(r"\d{4}-\d\d-\d\d(?:T\d{4})?-", d.name), f"{d}: name it YYYY-MM-DD-what (or YYYY-MM-DDTHHMM-what)"


def test_every_directive_names_a_command_or_says_none():
    directives = [benchmarks_doc.DIRECTIVE.match(line.strip())
                  for line in benchmarks_doc.SOURCE.read_text().splitlines() if line.strip().startswith("<!-- result:")]
    assert directives and all(directives), "a `<!-- result: ... -->` line does not parse"
    assert all(m.group("run").strip() for m in directives)


def test_a_newer_dir_replaces_an_older_ones_file_and_a_missing_file_says_not_measured(tmp_path):
    for name, rate in (("2026-01-01-a", 100.0), ("2026-01-01T0900-b", 200.0)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "x.json").write_text(json.dumps(
            {"machine": "m", "command": "c", "date": name[:10], "rate": rate}))
    (tmp_path / "2026-01-01-a" / "y.json").write_text(json.dumps({"machine": "m", "command": "c", "date": "d"}))
    assert benchmarks_doc.pick("x.json", tmp_path) == [tmp_path / "2026-01-01T0900-b" / "x.json"]
    assert benchmarks_doc.pick("y.json", tmp_path) == [tmp_path / "2026-01-01-a" / "y.json"]
    assert benchmarks_doc.pick("2026-01-01-a/x.json", tmp_path) == [tmp_path / "2026-01-01-a" / "x.json"]
    assert benchmarks_doc.pick("z.json", tmp_path) == []
    source = "# T\n\nintro\n\n## A target\n\n<!-- result: z.json | run: python benchmarks/z.py -->\n"
    text = benchmarks_doc.render(source, tmp_path)
    assert "Not measured in a result file kept in the repo: run `python benchmarks/z.py`." in text
    assert "| [A target](#a-target) | not measured | – |" in text
    shown = benchmarks_doc.render(source.replace("z.json", "x.json"), tmp_path)
    assert "Machine: m. Date: 2026-01-01. Command: `c`." in shown and "| rate | 200.0 |" in shown


def test_the_serve_matrix_shows_each_rounds_ratio(tmp_path):
    kept = benchmarks_doc.pick("serve_matrix.json")
    assert kept, "no serve_matrix.json under benchmarks/results/"
    data = json.loads(kept[0].read_text())
    data["rounds"] = 3
    for p in data["points"]:
        for side in ("before", "after"):
            p[side]["rounds_requests_per_s"] = [p[side]["requests_per_s"]] * 3
    (tmp_path / "2026-01-01-m").mkdir()
    (tmp_path / "2026-01-01-m" / "serve_matrix.json").write_text(json.dumps(data))
    r = benchmarks_doc.serve_matrix(benchmarks_doc.pick("serve_matrix.json", tmp_path))
    assert "after/before by round" in r.block and "3 round(s)" in r.headline


def _cited_sections() -> list[tuple[str, str]]:
    """(file, quoted section name) for every `BENCHMARKS.md ... "Section"` citation in the repo's docs and code."""
    found = []
    for path in sorted([*REPO_ROOT.glob("*.md"), *REPO_ROOT.glob("docs/*.md"), *REPO_ROOT.rglob("*.py")]):
        if ".venv" in path.parts or path.name == "test_benchmarks_doc.py":
            continue
        text = re.sub(r"\s*\n\s*(?:#\s*)?", " ", path.read_text(errors="replace"))
        # `git show REV:docs/BENCHMARKS.md` cites the journal kept in git, not this file
        found += [(str(path.relative_to(REPO_ROOT)), m.group(1))
                  for m in re.finditer(r'BENCHMARKS\.md[^"]{0,12}"([A-Za-z][^"]{2,100})"', text)
                  if not text[:m.start()].endswith(":docs/")]
    return found


def test_sections_cited_elsewhere_exist():
    headings = [line.lstrip("#").strip() for line in (REPO_ROOT / "docs" / "BENCHMARKS.md").read_text().splitlines()
                if line.startswith("#")]
    cited = _cited_sections()
    assert len(cited) > 5, cited
    missing = [(f, name) for f, name in cited if not any(h.startswith(name) for h in headings)]
    assert not missing, f"cited sections docs/BENCHMARKS.md no longer has (its headings come from benchmarks/targets.md): {missing}"
