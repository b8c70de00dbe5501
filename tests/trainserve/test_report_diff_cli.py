"""`trainserve diff` through typer's CliRunner: the tables, the files it writes, the gate's exit code, and one
sentence with exit code 1 for each bad input."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from tests.trainserve.diff_runs import example, make_run, scale  # noqa: F401 (fixtures)
from trainserve.cli import app


def _invoke(*args):
    return CliRunner().invoke(app, ["diff", *map(str, args)])


def test_the_gate_exits_1_past_its_threshold_and_0_within(make_run, tmp_path):
    base = make_run("base")
    new = make_run("new", lambda s: scale(s, "cuda", "Server", "capacity_req_s", 0.5))
    runs = tmp_path / "runs"
    past = _invoke("base", "new", "--runs-dir", runs, "--fail-on", "server_capacity<-10%")
    assert past.exit_code == 1, past.output
    assert "gate: cnn cuda Server server_capacity: -50.0%" in past.output and "Traceback" not in past.output
    within = _invoke(base, new, "--fail-on", "server_capacity<-60%,p99>+20%")
    assert within.exit_code == 0, within.output
    assert "gate: passed" in within.output and "Nothing differs" in within.output
    assert "server_capacity" in within.output


def test_html_md_and_json_are_written(make_run, tmp_path):
    base, new = make_run("base"), make_run("new", lambda s: s["machines"][0].update(logical_cpus=2))
    out = tmp_path / "out"
    r = _invoke(base / "report" / "summary.json", new, "--html", out / "d.html", "--md", out / "d.md",
                "--json", out / "d.json")
    assert r.exit_code == 0, r.output
    page = (out / "d.html").read_text()
    assert page.count("data:image/png;base64,") == 2  # one chart per section: cnn on cpu, cnn on cuda
    md = (out / "d.md").read_text()
    assert "(./diff-cnn-on-cuda.png)" in md and (out / "diff-cnn-on-cuda.png").stat().st_size > 1000
    data = json.loads((out / "d.json").read_text())
    assert data["diffs"][0]["differences"] == [{"section": "host", "name": "logical CPUs", "a": 16, "b": 2}]
    assert not list(out.glob(".*.tmp"))
    stdout = _invoke(base, new, "--json", "-")
    assert json.loads(stdout.stdout)["breaches"] == []


@pytest.mark.parametrize("args, words", [
    (["nowhere", "base"], "run 'nowhere' not found"),
    (["empty", "base"], "is not a run with a report"),
    (["base"], "needs two runs or more"),
    (["base", "base", "--fail-on", "p99 up 20%"], "does not parse"),
    (["base", "base", "--fail-on", "latency>+20%"], "unknown figure 'latency'"),
    (["base", "base", "--noise", "lots"], "not a percentage"),
])
def test_a_bad_input_is_one_sentence_and_exit_1(make_run, tmp_path, args, words):
    make_run("base")
    (tmp_path / "runs" / "empty").mkdir()
    r = _invoke(*args, "--runs-dir", tmp_path / "runs")
    assert r.exit_code == 1, r.output
    assert words in r.output and "Traceback" not in r.output
    assert len([line for line in r.stderr.splitlines() if line.strip()]) == 1


def test_report_baseline_sets_each_figure_beside_the_baselines(tmp_path):
    from tests.trainserve.test_report import make_run as make_records

    runs = tmp_path / "runs"
    make_records(runs, "base")
    make_records(runs, "new")
    assert _report("base", runs).exit_code == 0
    r = _report("new", runs, "--baseline", "base")
    assert r.exit_code == 0, r.output
    md = (runs / "new" / "report" / "report.md").read_text()
    section = md[md.index("## Against the baseline base"):]
    assert "### What differs between the runs" in section and "0 beyond the noise" in section
    assert "| +0.0% | noise" in section
    page = (runs / "new" / "report" / "report.html").read_text()
    assert "<section id='baseline'>" in page
    missing = _report("new", runs, "--baseline", "nowhere")
    assert missing.exit_code == 1 and "run 'nowhere' not found" in missing.output and "Traceback" not in missing.output


def _report(run, runs, *args):
    return CliRunner().invoke(app, ["report", "--run", run, "--runs-dir", str(runs), *args])
