"""`trainserve frontier` end to end on the CPU (tiny sizes), and the report's frontier section and sentence."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from tests.docpaths import assert_documented_artifacts

from trainserve.cli import app
from trainserve.core.frontier_result import FrontierPoint, FrontierResult, SeriesFit, load_all
from trainserve.report.memory.frontier_plot import frontier_figures
from trainserve.report.memory.memory_frontier import device_section, frontier_sections, html_section, md_section


def _pt(series: str, size: int, params: int, peak: int, status: str = "fits", **kw) -> FrontierPoint:
    mode, precision = series.split()[:2]
    return FrontierPoint(series=series, mode=mode, precision=precision, checkpointing=series.endswith("ckpt"),
                         size=size, params=params, batch_size=8, status=status, peak_bytes=peak, **kw)


def _result() -> FrontierResult:
    gib = 2**30
    points = [_pt("train bf16", 64, 10**8, 20 * gib), _pt("train bf16", 128, 4 * 10**8, 90 * gib, "does_not_fit"),
              _pt("train bf16 ckpt", 64, 10**8, 12 * gib), _pt("infer fp16", 64, 10**8, gib),
              _pt("infer fp16", 128, 4 * 10**8, 3 * gib),
              _pt("infer fp16", 512, 3 * 10**9, 70 * gib, source="edge_check", predicted_bytes=72 * gib)]
    fits = [SeriesFit("train bf16", 16, 0, 0, 2, 0.01, edge_size=96, edge_params=2 * 10**8,
                      edge_predicted_bytes=70 * gib, edge_checked=""),
            SeriesFit("infer fp16", 2, 0, 0, 2, 0.02, edge_size=512, edge_params=3 * 10**9,
                      edge_predicted_bytes=72 * gib, edge_checked="fits", edge_measured_bytes=70 * gib)]
    return FrontierResult(device="cuda", device_name="NVIDIA H100 80GB HBM3", model="transformer", batch_size=8,
                          capacity_bytes=80 * gib, capacity_source="the card's total memory", points=points, fits=fits)


def test_the_sentence_names_each_edge_and_says_what_was_predicted(tmp_path):
    d = device_section(_result())
    assert d.sentence.startswith("On this NVIDIA H100 80GB HBM3 (80.0 GiB, the card's total memory) you can train up "
                                 "to 200 M (predicted, not measured) parameters (bf16, batch 8; up to 100 M with activation "
                                 "checkpointing) and serve at least 3 B (fp16, batch 8) (at least: measured to fit, "
                                 "and the edge search stopped before a larger size was measured not to; the notes "
                                 "below say why).")
    edges = {s.series: s for s in d.series}
    assert edges["infer fp16"].edge_source == "checked, at least"  # no larger size was measured not to fit
    bracketed = _result()
    bracketed.fits[1].edge_above_checked = "does_not_fit"  # the next size up failed: the edge is known
    edge = {s.series: s for s in device_section(bracketed).series}["infer fp16"]
    assert edge.edge_source == "predicted, checked (the next size did not fit)"
    assert "serve up to 3 B (fp16, batch 8)" in device_section(bracketed).sentence
    stopped = _result()
    stopped.fits[1].note = "edge search stopped: the series' share of the budget ran out"
    assert any(n.startswith("infer fp16: edge search stopped: the series' share of the budget ran out (`trainserve "
                            "frontier --device cuda --budget-s N`") for n in device_section(stopped).notes)
    assert edges["train bf16"].stopped_at_params == 4 * 10**8
    _result().save(tmp_path / "frontier")
    sections = frontier_sections(tmp_path)
    figures = frontier_figures(tmp_path, sections)
    assert list(figures) == ["modelsize-cuda.png"] and figures["modelsize-cuda.png"][:4] == b"\x89PNG"
    html = html_section(sections, figures, lambda h, r: f"<table>{len(r)}</table>", lambda n: f"<img {n}>")
    assert "<img modelsize-cuda.png>" in html and "<table>3</table>" in html
    assert any("(predicted, not measured)" in line for line in md_section(sections, figures, lambda h, r: []))


def test_frontier_command_on_the_cpu_writes_what_the_report_reads(tmp_path):
    args = ["frontier", "--device", "cpu", "--sizes", "32,48", "--seq-len", "16", "--vocab-size", "64", "-b", "4",
            "--train-precisions", "fp32", "--no-checkpointing", "--memory-cap-gib", "0.001", "--no-check-edge",
            "--runs-dir", str(tmp_path), "--run", "r"]
    out = CliRunner().invoke(app, args)
    assert out.exit_code == 0, out.output
    (result,) = load_all(tmp_path / "r")
    series = {p.series for p in result.points}
    assert series == {"train fp32", "infer fp32", "infer int8", "train fp32 shard/2"}
    assert all(p.peak_bytes for p in result.points if p.status == "fits")
    assert "inference fp16 is measured on GPUs only" in out.output
    assert "you can train up to" in out.output
    assert json.loads((tmp_path / "r" / "frontier" / "cpu.json").read_text())["schema_version"] == 1
    assert_documented_artifacts("frontier", tmp_path / "r")


def test_bad_frontier_input_is_one_sentence_and_exit_1(tmp_path):
    out = CliRunner().invoke(app, ["frontier", "--device", "cpu", "--sizes", "64,x", "--runs-dir", str(tmp_path)])
    assert out.exit_code == 1
    assert "--sizes '64,x' is invalid" in out.output and "Traceback" not in out.output


def test_a_modelled_sharded_series_is_drawn_labelled_and_left_out_of_the_edges(monkeypatch):
    from trainserve.core.frontier_result import sharded_point
    from trainserve.report.memory import frontier_plot

    r = _result()
    plain = _pt("train bf16", 64, 10**8, 20 * 2**30, weights_bytes=4 * 10**8, gradients_bytes=4 * 10**8,
                optimizer_bytes=8 * 10**8, activations_bytes=20 * 2**30 - 16 * 10**8)
    r.points.append(sharded_point(plain, 2, r.capacity_bytes))
    assert [s.series for s in device_section(r).series] == ["train bf16", "train bf16 ckpt", "infer fp16"]
    figs = []
    monkeypatch.setattr(frontier_plot, "png_bytes", lambda fig: figs.append(fig) or b"")
    frontier_plot.chart(r, device_section(r))
    labels = [t.get_text() for t in figs[0].axes[0].get_legend().get_texts()]
    assert "train bf16 shard/2 per rank (modelled)" in labels
