"""report/diff/run_diff.py and diff_gate.py on crafted runs with known differences: a change inside the noise is not
flagged, one outside is, in the figure's own sense of better; other operating points are apart; a run against
itself shows no change."""

from __future__ import annotations

import pytest

from tests.trainserve.diff_runs import example, make_run, scale  # noqa: F401 (fixtures)
from trainserve.core.errors import UserError
from trainserve.report.diff.diff_gate import breaches, parse_fail_on
from trainserve.report.diff.diff_render import html, markdown
from trainserve.report.diff.run_diff import Spread, diff_runs, load_run, parse_noise, welch_p


def _diff(make_run, change, noise="5%"):
    a_info, a = load_run(str(make_run("base")))
    b_info, b = load_run(str(make_run("new", change)))
    return diff_runs(a_info, a, b_info, b, parse_noise(noise))


def _change(diff, device, scenario, name):
    return next(c for c in diff.changes if (c.device, c.scenario, c.name) == (device, scenario, name))


def test_a_run_against_itself_shows_no_change(make_run):
    d = _diff(make_run, None)
    assert d.changes and not d.apart
    assert d.differences == []
    assert all(c.change_pct == 0 and c.direction == "same" and not c.beyond_noise for c in d.changes)
    assert breaches(d, parse_fail_on("server_capacity<-0%,p99>+0%")) == []


def test_a_change_inside_the_noise_is_not_flagged(make_run):
    def change(s):
        scale(s, "cuda", "Server", "capacity_req_s", 0.97)  # 3% within a ±28% CI: Welch
        s["models"]["cnn"]["limits"]["cuda"]["batch1_p50_ms"] *= 1.03  # no repeats: inside the 5% band

    d = _diff(make_run, change)
    cap = _change(d, "cuda", "Server", "server_capacity")
    assert cap.method == "welch" and cap.change_pct == pytest.approx(-3) and not cap.beyond_noise
    lim = _change(d, "cuda", "limits", "limit_p50")
    assert lim.method == "band" and lim.change_pct == pytest.approx(3) and not lim.beyond_noise


def test_a_change_outside_the_noise_is_flagged_in_the_figures_own_direction(make_run):
    def change(s):
        scale(s, "cuda", "Server", "capacity_req_s", 0.5)  # capacity down: worse
        scale(s, "cuda", "Offline", "throughput_samples_s", 1.3)  # samples/s up: better
        s["models"]["cnn"]["limits"]["cuda"]["batch1_p50_ms"] *= 1.3  # latency up: worse
        s["models"]["cnn"]["limits"]["cpu"]["batch1_p50_ms"] *= 0.7  # latency down: better

    d = _diff(make_run, change)
    cap = _change(d, "cuda", "Server", "server_capacity")
    assert (cap.method, cap.direction, cap.beyond_noise) == ("welch", "worse", True) and cap.p_value < 0.05
    assert cap.change_pct == pytest.approx(-50)
    off = _change(d, "cuda", "Offline", "throughput")
    assert (off.direction, off.beyond_noise) == ("better", True)
    assert (_change(d, "cuda", "limits", "limit_p50").direction, _change(d, "cpu", "limits", "limit_p50").direction) \
        == ("worse", "better")
    assert all(_change(d, *k).beyond_noise for k in (("cuda", "limits", "limit_p50"), ("cpu", "limits", "limit_p50")))
    # a wider band swallows the 30% figures without repeats; the tested one stays flagged
    wide = _diff(make_run, change, noise="40%")
    assert not _change(wide, "cuda", "limits", "limit_p50").beyond_noise
    assert _change(wide, "cuda", "Server", "server_capacity").beyond_noise


def test_other_operating_points_and_missing_figures_are_listed_apart(make_run):
    def change(s):
        s["scenarios"]["models"]["cnn"]["cpu"]["Server"]["slo_p99_ms"] = 100.0
        s["scenarios"]["models"]["cnn"]["cuda"]["Offline"] = None
        s["machines"][0]["logical_cpus"] = 2

    d = _diff(make_run, change)
    apart = {(x.device, x.scenario, x.name): x.reason for x in d.apart}
    assert apart[("cpu", "Server", "server_capacity")] == "operating_point"
    assert apart[("cuda", "Offline", "throughput")] == "only_a"
    assert not any((c.device, c.scenario) in {("cpu", "Server"), ("cuda", "Offline")} for c in d.changes)
    assert [(x.section, x.name, x.a, x.b) for x in d.differences if x.section == "host"] == [
        ("host", "logical CPUs", 16, 2)]
    assert d.differences[0].section == "host"  # why before how much


def test_the_gate_fails_past_its_threshold_beyond_the_noise_only(make_run):
    d = _diff(make_run, lambda s: scale(s, "cuda", "Server", "capacity_req_s", 0.5))
    assert len(breaches(d, parse_fail_on("server_capacity<-10%"))) == 1
    assert breaches(d, parse_fail_on("server_capacity<-60%")) == []
    assert breaches(d, parse_fail_on("cpu.server_capacity<-10%")) == []  # narrowed to the other device
    assert len(breaches(d, parse_fail_on("cuda.server_capacity<-10%,p99>+20%"))) == 1
    inside = _diff(make_run, lambda s: scale(s, "cuda", "Server", "capacity_req_s", 0.85))
    assert breaches(inside, parse_fail_on("server_capacity<-10%")) == []  # -15%, but within its CI


@pytest.mark.parametrize("rule, words", [("p99>>20%", "does not parse"), ("p98>+20%", "unknown figure"),
                                         ("gpu.p99>+20%", "neither a device nor a scenario"), (",", "no rule")])
def test_a_bad_gate_is_one_sentence(rule, words):
    with pytest.raises(UserError, match=words):
        parse_fail_on(rule)


def test_noise_and_welch():
    assert parse_noise("5%") == parse_noise(" 5 ") == 5.0
    with pytest.raises(UserError, match="not a percentage"):
        parse_noise("five")
    same = Spread.of(3, 10.0, 1.0)
    assert welch_p(same, same) == pytest.approx(1.0)
    assert welch_p(same, Spread.of(3, 20.0, 1.0)) < 0.01


def test_the_views_say_why_before_how_much(make_run):
    d = _diff(make_run, lambda s: s["machines"][0].update(logical_cpus=2))
    md = markdown(d, figures={})
    assert md.index("What differs") < md.index("## cnn on cpu") and "logical CPUs" in md
    page = html(d, figures={})
    assert page.index("What differs") < page.index("cnn on cuda") and "<table>" in page
