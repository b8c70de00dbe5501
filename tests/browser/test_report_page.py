"""The report in Chromium: a freshly built report.html and docs/example-report/report.html.

No console or page errors, every image decoded, nothing loaded from outside the file, every `#`
link has its target, and no sideways scrolling of the page on a phone (390 px) or a laptop (1280 px).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO_ROOT

pytestmark = pytest.mark.slow

WIDTHS = (390, 1280)

# What the page holds, measured in the browser after opening every <details>.
MEASURE = """() => {
  document.querySelectorAll("details").forEach(d => d.open = true);
  const doc = document.documentElement;
  const imgs = [...document.images].map(i => ({src: i.alt || i.src.slice(0, 40), w: i.naturalWidth}));
  const refs = [...document.querySelectorAll("[src], [href]")]
    .map(e => e.getAttribute("src") ?? e.getAttribute("href"))
    .filter(r => !r.startsWith("data:") && !r.startsWith("#"));
  const anchors = [...document.querySelectorAll('a[href^="#"]')].map(a => a.getAttribute("href").slice(1))
    .filter(id => !document.getElementById(id));
  // elements that reach past the right edge of their section (a scroll box may, inside itself)
  const spill = [];
  for (const s of document.querySelectorAll("section, header")) {
    const right = s.getBoundingClientRect().right + 0.5;
    for (const e of s.querySelectorAll("*")) {
      const box = e.closest(".tablewrap, .scrollbox");
      if (box && box !== e) continue;
      if (e.getBoundingClientRect().right > right) spill.push(`${s.id || s.tagName}: ${e.tagName}.${e.className}`);
    }
  }
  // the model table's scroll box shows a value column beside the row labels
  const hidden = [...document.querySelectorAll("section[id^=model-] .tablewrap")].filter(w => {
    const cell = w.querySelector("tbody tr:not(.group) td:nth-child(2)");
    return cell && cell.getBoundingClientRect().left + 40 > w.getBoundingClientRect().right;
  }).length;
  // tables that need sideways scrolling inside their box
  const scrolls = [...document.querySelectorAll(".tablewrap")].filter(w => w.scrollWidth > w.clientWidth + 1)
    .map(w => w.closest("section").id);
  return {scrollWidth: doc.scrollWidth, width: window.innerWidth, imgs, refs, anchors,
          spill: spill.slice(0, 10), hidden, scrolls};
}"""


@pytest.fixture(scope="module")
def quick_report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A report built from the crafted records of tests/trainserve/test_report.py (CPU and GPU, ramps)."""
    from tests.trainserve.test_report import make_run
    from trainserve.report import build_report

    return build_report(make_run(tmp_path_factory.mktemp("runs")))


def check_report(tab: Any, html: Path) -> None:
    page = tab.page
    external: list[str] = []
    page.on("request", lambda r: external.append(r.url) if not r.url.startswith(("file:", "data:")) else None)
    for width in WIDTHS:
        page.set_viewport_size({"width": width, "height": 900})
        page.goto(html.resolve().as_uri())
        page.wait_for_load_state("load")
        m = page.evaluate(MEASURE)
        assert m["imgs"] and all(i["w"] > 0 for i in m["imgs"]), m["imgs"]
        assert not m["refs"], f"references outside the file: {m['refs']}"
        assert not m["anchors"], f"# links without a target: {m['anchors']}"
        assert m["scrollWidth"] <= m["width"], f"{width} px: the page is {m['scrollWidth']} px wide"
        assert not m["spill"], f"{width} px: reaching out of their box: {m['spill']}"
        assert not m["hidden"], f"{width} px: a model table shows only its row labels"
        if width >= 1280:  # a laptop: every table fits its box, file names wrap at '/'
            assert not m["scrolls"], f"{width} px: tables wider than their box in {m['scrolls']}"
    assert not external, f"requests outside the file: {external}"
    assert not tab.errors, tab.errors


def test_quick_report_in_the_browser(tab: Any, quick_report: Path) -> None:
    check_report(tab, quick_report)


def test_example_report_in_the_browser(tab: Any) -> None:
    check_report(tab, REPO_ROOT / "docs" / "example-report" / "report.html")


# What the page promises a reader (alt text, grouped warnings, a measured first tile), read in the browser.
PAGE_FACTS = """() => ({
  alts: [...document.images].map(i => i.alt),
  warnHeading: document.querySelector("#warnings h2").textContent,
  warnItems: document.querySelectorAll("#warnings div.warn").length,
  firstTile: (document.querySelector("#summary .tile") || {}).textContent || "",
  firstTileMeasured: !document.querySelector("#summary .tile .v.nm") ||
    document.querySelector("#summary .tile") !== document.querySelector("#summary .tile .v.nm").closest(".tile"),
})"""


def _with_repeated_warnings(run: Path) -> Path:
    """Three records of the crafted run carry the same warning with their own figures, as sweep points do."""
    import json

    for k, rel in enumerate(("compare/profile-cpu.json", "load/embedded-cpu.json", "load/embedded-cpu-b64.json")):
        path = run / rel
        record = json.loads(path.read_text())
        record["validity"]["warnings"] = [f"GPU utilization averaged {k}.5% (< 50%) while 1.{k} GiB was in use"]
        path.write_text(json.dumps(record))
    return run


def test_charts_have_alt_texts_and_repeated_warnings_are_grouped(tab: Any, tmp_path: Path) -> None:
    from tests.trainserve.test_report import make_run
    from trainserve.report import build_report

    html = build_report(_with_repeated_warnings(make_run(tmp_path / "runs")))
    tab.page.goto(html.resolve().as_uri())
    facts = tab.page.evaluate(PAGE_FACTS)
    assert facts["alts"] and all(not a.endswith(".png") and "model" in a and len(a) > 40 for a in facts["alts"]), \
        facts["alts"]
    import re

    total, kinds = map(int, re.fullmatch(r"Warnings \((\d+), (\d+) kinds?\)", facts["warnHeading"]).groups())
    assert kinds <= total - 2 and facts["warnItems"] == kinds, facts  # the three say one thing: one item
    assert "3 records: GPU utilization averaged 0.5%" in tab.page.inner_text("#warnings")
    assert not tab.errors, tab.errors


def test_a_cpu_only_report_leads_with_what_it_measured(tab: Any, tmp_path: Path) -> None:
    from tests.trainserve.test_report import make_run
    from trainserve.report import build_report

    html = build_report(make_run(tmp_path / "runs", gpu=False))
    tab.page.set_viewport_size({"width": 390, "height": 900})
    tab.page.goto(html.resolve().as_uri())
    facts = tab.page.evaluate(PAGE_FACTS)
    assert facts["firstTileMeasured"] and "GPU vs CPU" not in facts["firstTile"], facts["firstTile"]
    assert not tab.errors, tab.errors


def test_a_phone_gets_legible_charts_and_scroll_hints(tab: Any, quick_report: Path) -> None:
    page = tab.page
    page.set_viewport_size({"width": 390, "height": 900})
    page.goto(quick_report.resolve().as_uri())
    facts = page.evaluate("""() => ({
      widths: [...document.querySelectorAll("section[id^=model-] .figs img")].map(i => i.getBoundingClientRect().width),
      hints: [...document.querySelectorAll(".scrollhint")].filter(h => h.offsetParent !== null).length,
      scrolls: [...document.querySelectorAll(".figs.scrollbox")].every(b => b.scrollWidth > b.clientWidth),
    })""")
    assert facts["widths"] and min(facts["widths"]) >= 600, facts  # not ~330 px with unreadable text
    assert facts["hints"] >= 2 and facts["scrolls"], facts
    page.set_viewport_size({"width": 1280, "height": 900})
    assert page.evaluate("[...document.querySelectorAll('.scrollhint')].every(h => h.offsetParent === null)")
    assert not tab.errors, tab.errors
