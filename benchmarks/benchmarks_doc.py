"""docs/BENCHMARKS.md, made from benchmarks/targets.md and the result files under benchmarks/results/.

    python benchmarks/benchmarks_doc.py --write   # rewrite docs/BENCHMARKS.md
    python benchmarks/benchmarks_doc.py --check   # exit 1 when docs/BENCHMARKS.md differs (tests/test_benchmarks_doc.py)
    python benchmarks/benchmarks_doc.py --list    # each target's result file, or "not measured"

benchmarks/targets.md is the hand-written part: one section per speed target (what it measures, the
script that measures it, where it is meant to run). In it, each line

    <!-- result: NAME | run: COMMAND -->

becomes the figures of the result file called NAME, or, when no results dir has one, the sentence
"Not measured in a result file kept in the repo: run `COMMAND`." NAME may be a glob (`frontier-*.json`:
every match of the chosen dir), may pin one dir (`2026-12-07-h100/serve_matrix.json`), and may name a view
of a file after `#` (`default-run-summary.json#batching`: a renderer reading one part of it).

Which file a directive shows: the results dirs (benchmarks/results/DIR/) are taken newest first, newest
being the greatest name in sort order, and the first dir holding a match of NAME wins (all of that dir's
matches for a glob: a new dir with frontier-cuda.json alone hides an older dir's frontier-cpu.json). So a
dir's name starts with its date, YYYY-MM-DD (the test checks); a later dir of the same day takes a time
after the date, YYYY-MM-DDTHHMM-what: "T" sorts after "-", so `2026-12-07T0900-h100` replaces
`2026-12-07-h100`, where `2026-12-07-gpu` would not (it sorts before).

Adding a results dir, e.g. a GPU session's serve matrix, searches, frontier and FSDP figures:

    d=benchmarks/results/2026-12-07T0900-h100 && mkdir $d
    cp OUT/serve_matrix.json OUT/searches.json OUT/frontier-cuda.json OUT/fsdp.json $d/
    python benchmarks/benchmarks_doc.py --stamp $d/frontier-cuda.json --machine "NVIDIA H100 80GB HBM3, ..." \
        --command "trainserve frontier --device cuda ..." --date 2026-12-07   # a file written without them
    python benchmarks/benchmarks_doc.py --list && python benchmarks/benchmarks_doc.py --write

The file names are the ones targets.md's directives give (serve_matrix.json, searches.json,
frontier-*.json, fsdp*.json, ...); every JSON needs top-level `machine`, `command` and `date` (the test
checks; `--stamp` adds them to a file a product command wrote). After `--write`, every target whose file
the new dir holds shows the new file; the others keep the older dir's. A file no target names yet: add a
directive for it to targets.md. JSON files with a renderer (RENDERERS, by file-name pattern) become
tables; any other JSON shows its provenance and its .md side file when it has one, else its top-level
scalar figures (add a renderer for a table); a .md file is shown as it is.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import re
import statistics
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "benchmarks" / "targets.md"
RESULTS = ROOT / "benchmarks" / "results"
DOC = ROOT / "docs" / "BENCHMARKS.md"
JOURNAL = "aa232bf"  # the last hand-written docs/BENCHMARKS.md, figures with no result file included
DIRECTIVE = re.compile(r"^<!-- result: (?P<name>[^|#]+?)(?:#(?P<view>\w+))? \| run: (?P<run>.*?) -->$")
REQUIRED = ("machine", "command", "date")
GIB = 2**30


@dataclass
class Rendered:
    block: str  # markdown put where the directive was
    headline: str  # the figure the contents table shows
    where: str  # machine and date, for the contents table


# ------------------------------------------------------------------ picking files
def results_dirs(results: Path = RESULTS) -> list[Path]:
    """Newest first: the greatest name sorts first (names start with their date)."""
    return sorted((d for d in results.iterdir() if d.is_dir()), key=lambda d: d.name, reverse=True)


def pick(name: str, results: Path = RESULTS) -> list[Path]:
    """The files matching `name` in the newest results dir that has any (a `DIR/` prefix pins the dir)."""
    if "/" in name:
        folder, pattern = name.rsplit("/", 1)
        dirs = [results / folder]
    else:
        dirs, pattern = results_dirs(results), name
    for d in dirs:
        found = sorted(p for p in d.glob(pattern) if p.is_file())
        if found:
            return found
    return []


# ------------------------------------------------------------------ formatting
def machine_text(m: object) -> str:
    if isinstance(m, dict):
        cpu = m.get("cpu_model") or m.get("cpu") or ""
        cpus = m.get("cpu_count") or m.get("logical_cpus")
        parts = [", ".join(m["gpus"]) if m.get("gpus") else "", f"{cpu} ({cpus} CPUs)" if cpus else cpu]
        return ", ".join(p for p in parts if p) or json.dumps(m)
    return str(m).strip(", ")


def where(data: dict) -> str:
    return f"{machine_text(data.get('machine'))}, {data.get('date')}"


def provenance(data: dict, files: list[Path]) -> str:
    names = ", ".join(f"`{rel(p)}`" for p in files)
    return (f"Machine: {machine_text(data.get('machine'))}. Date: {data.get('date')}. "
            f"Command: `{data.get('command')}`. File: {names}.\n")


def num(v: float | None, fmt: str = ",.0f") -> str:
    return "–" if v is None else format(v, fmt)


def params(n: float) -> str:
    if n >= 1e11:
        return f"{n / 1e9:,.0f} B"
    return f"{n / 1e9:.2f} B" if n >= 1e9 else f"{n / 1e6:.1f} M"


def table(head: list[str], rows: list[list[str]], right: set[int] = frozenset()) -> str:
    align = ["---:" if i in right else "---" for i in range(len(head))]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join(align) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def rel(path: Path) -> str:
    """A file's path from the repository root (as it is when outside it)."""
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def load(path: Path) -> dict:
    return json.loads(path.read_text())


# ------------------------------------------------------------------ renderers
def serve_matrix(files: list[Path]) -> Rendered:
    data = load(files[0])
    rounds = data.get("rounds", 1)
    head = ["device", "protocol", "users", "before req/s", "after req/s", "after/before", "p50 ms before → after",
            "p99 ms before → after", "mean batch after"]
    if rounds > 1:
        head.append("after/before by round")
    rows, ratios = [], []
    for p in data["points"]:
        b, a = p["before"], p["after"]
        ratio = p.get("ratio_requests_per_s")
        ratios.append(ratio)
        row = [p["device"], p["protocol"], str(p["users"]), num(b["requests_per_s"]), num(a["requests_per_s"]),
               f"**{num(ratio, '.2f')}x**", f"{num(b['p50_ms'], '.2f')} → {num(a['p50_ms'], '.2f')}",
               f"{num(b['p99_ms'], '.2f')} → {num(a['p99_ms'], '.2f')}", num(a.get("mean_batch"), ".2f")]
        if rounds > 1:
            # each side's list is in round order, so one index is one round of both servers
            per = [x / y for x, y in zip(a.get("rounds_requests_per_s", []), b.get("rounds_requests_per_s", []))
                   if y]
            row.append(", ".join(f"{r:.2f}" for r in per))
        rows.append(row)
    known = [r for r in ratios if r is not None]
    headline = (f"after/before req/s {min(known):.2f}x–{max(known):.2f}x over {len(known)} points "
                f"(median {statistics.median(known):.2f}x), {rounds} round(s)")
    note = (f"Model {data.get('model')}, batch 1, {data.get('seconds')} s per point, the median of {rounds} "
            f"round(s); before = `{data['checkouts']['before']}`, after = `{data['checkouts']['after']}`.\n\n")
    return Rendered(provenance(data, files) + note + table(head, rows, {3, 4, 5, 8}), headline, where(data))


def searches(files: list[Path]) -> Rendered:
    data = load(files[0])
    rows, caps = [], []
    for s in data["searches"]:
        est = (f"{num(s.get('estimate_req_s'))} req/s at {s.get('estimate_users')} users"
               if s.get("estimate_req_s") else "–")
        caps.append(s.get("capacity_req_s"))
        rows.append([s.get("label") or s["record"], f"{num(s.get('budget_s'))} s", est,
                     ", ".join(f"{r:,}" for r in s.get("rates_tried", [])),
                     ("≥ " if s.get("lower_bound") else "") + num(s.get("capacity_req_s")),
                     num(s.get("upper_req_s")), s.get("stop_reason") or "", num(s.get("elapsed_s"))])
    slo = data["searches"][0].get("slo_p99_ms")
    known = [c for c in caps if c is not None]
    headline = f"capacity {min(known):,.0f}–{max(known):,.0f} req/s within p99 ≤ {slo:g} ms over {len(known)} searches"
    head = ["search", "budget", "closed-loop estimate", "rates tried (req/s)", "capacity req/s", "next failing",
            "stop", "seconds"]
    return Rendered(provenance(data, files) + f"SLO: p99 ≤ {slo:g} ms.\n\n" + table(head, rows, {1, 4, 5, 7}),
                    headline, where(data))


def default_run(files: list[Path]) -> Rendered:
    data = load(files[0])
    v = data["verdict"]
    lines = [f"Verdict: **{v['result']}**, {v['checked']} records checked"
             + (f"; reasons: {'; '.join(v['reasons'])}" if v["reasons"] else "") + ". The report's answers:", ""]
    lines += [f"- {a['text']}" for a in data.get("answers", [])]
    headline = f"{v['result']}, {v['checked']} records checked, {len(data.get('answers', []))} answers"
    return Rendered(provenance(data, files) + "\n" + "\n".join(lines) + "\n", headline, where(data))


def _models(data: dict) -> list[tuple[str, dict]]:
    return sorted(data.get("models", {}).items())


def default_run_train_speedup(files: list[Path]) -> Rendered:
    data = load(files[0])
    rows, heads = [], []
    for name, m in _models(data):
        for key, label in (("train", "same batch and precision"), ("train_best", "each at its best")):
            s = m.get("speedups", {}).get(key)
            if not s:
                continue
            c, g = s.get("cpu_point", {}), s.get("gpu_point", {})
            rows.append([name, label, f"{num(s['cpu'])} (batch {c.get('batch_size')} {c.get('precision')})",
                         f"{num(s['gpu'])} (batch {g.get('batch_size')} {g.get('precision')})",
                         f"**{s['value']:.1f}x**"])
            heads.append(f"{name} {s['value']:.1f}x ({label})")
    head = ["model", "basis", "CPU samples/s", "GPU samples/s", "GPU/CPU"]
    return Rendered(provenance(data, files) + "\n" + table(head, rows, {4}),
                    "GPU/CPU training: " + ", ".join(heads), where(data))


def default_run_server_vs_limit(files: list[Path]) -> Rendered:
    data = load(files[0])
    rows, heads = [], []
    for name, m in _models(data):
        served_p50 = m.get("speedups", {}).get("infer_batch1", {})
        for dev, sv in sorted(m.get("server_vs_limit", {}).items()):
            lim = m.get("limits", {}).get(dev, {})
            p50 = served_p50.get("gpu" if dev == "cuda" else "cpu")
            rows.append([name, dev, num(lim.get("batch1_p50_ms"), ".2f"), num(p50, ".2f"),
                         f"**+{num(sv.get('batch1_overhead_ms'), '.2f')}**", num(lim.get("best_throughput_samples_s")),
                         f"**{num(sv.get('saturated_efficiency'), '.2f')}**"])
            heads.append(f"{dev} +{sv.get('batch1_overhead_ms'):.2f} ms at batch 1, "
                         f"{sv.get('saturated_efficiency'):.2f}x in-process saturated")
    head = ["model", "device", "in process batch-1 p50 ms", "served batch-1 p50 ms", "served − in process ms",
            "in-process best samples/s", "served saturated ÷ in-process best"]
    return Rendered(provenance(data, files) + "\n" + table(head, rows, {2, 3, 4, 5, 6}), "; ".join(heads),
                    where(data))


def default_run_batching(files: list[Path]) -> Rendered:
    data = load(files[0])
    rows, heads = [], []
    for name, m in _models(data):
        for dev, b in sorted(m.get("batching", {}).items()):
            on, off = b["on"], b["off"]
            rows.append([name, dev, ("≥ " if on.get("lower_bound") else "") + num(on["capacity_req_s"]),
                         num(on.get("p99_ms"), ".1f"), num(on.get("mean_batch"), ".1f"),
                         ("≥ " if off.get("lower_bound") else "") + num(off["capacity_req_s"]),
                         num(off.get("p99_ms"), ".1f"), f"**{b['capacity_ratio']:.1f}x**"])
            heads.append(f"{dev} {b['capacity_ratio']:.1f}x")
    slo = data.get("costs", {}).get("slo_p99_ms")
    head = ["model", "device", "batching on: req/s", "p99 ms", "mean batch", "batching off: req/s", "p99 ms",
            "on/off"]
    note = f"Capacity within p99 ≤ {slo:g} ms (the Server search).\n\n" if slo else ""
    return Rendered(provenance(data, files) + note + table(head, rows, {2, 3, 4, 5, 6, 7}),
                    "dynamic batching on/off: " + ", ".join(heads), where(data))


MEASURED = ("measured", "edge_check")  # a frontier point's sources that were run, not modelled


def frontier(files: list[Path]) -> Rendered:
    blocks, heads, wheres = [], [], []
    for path in files:
        data = load(path)
        measured: dict[str, dict] = {}
        for p in data["points"]:
            if p["status"] == "fits" and p["source"] in MEASURED and p["params"] > measured.get(
                    p["series"], {}).get("params", -1):
                measured[p["series"]] = p
        rows = []
        for f in data.get("fits", []):
            top = measured.get(f["series"])
            edge = f"{params(f['edge_params'])}" if f.get("edge_params") else "–"
            if top and f.get("edge_params") and f["edge_params"] > 4 * top["params"]:
                edge += " (past 4x the largest measured: not read)"
            checked = "–"
            if f.get("edge_measured_bytes"):
                checked = (f"{f['edge_checked']}: {f['edge_measured_bytes'] / GIB:.1f} GiB, "
                           f"{f['edge_error']:+.1%} of predicted"
                           + (f"; next size {f['edge_above_checked'].replace('_', ' ')}"
                              if f.get("edge_above_checked") else ""))
            rows.append([f["series"], params(top["params"]) if top else "–",
                         f"{top['peak_bytes'] / GIB:.2f}" if top else "–", edge, checked,
                         f"{f['max_rel_error']:.0%}", f.get("note") or ""])
        cap = data.get("capacity_bytes")
        note = (f"{data.get('model')} at batch {data.get('batch_size')}"
                + (f", sequence {data['seq_len']}" if data.get("seq_len") else "")
                + f", on {data.get('device_name')}"
                + (f" ({cap / GIB:.1f} GiB, {data.get('capacity_source')})" if cap else "")
                + f"; {data.get('stopped') or 'every series ran to its edge'}.\n\n")
        head = ["series", "largest measured", "its peak GiB", "fit's edge (params)", "edge measured",
                "fit's worst error", "note"]
        blocks.append(provenance(data, [path]) + note + table(head, rows, {1, 2, 3, 5}))
        train = [r for r in rows if r[0].startswith("train")]
        if train:
            best = max(train, key=lambda r: measured.get(r[0], {}).get("params", 0))
            heads.append(f"{data.get('device_name')}: training measured to {best[1]} parameters "
                         f"({best[2]} GiB peak), fit's edge {best[3].split(' (')[0]}")
        wheres.append(where(data))
    return Rendered("\n".join(blocks), "; ".join(heads), "; ".join(dict.fromkeys(wheres)))


def frontends_ipc(files: list[Path]) -> Rendered:
    sides: dict[str, list[dict]] = {}
    first = load(files[0])
    for path in files:
        data = load(path)
        sides.setdefault(data.get("side", "after"), []).extend(data["rounds"])
    parts = [("core_infer_us", "ServerCore.infer alone"),
             ("model_process_us_one_by_one", "model process, one request per message"),
             ("front_end_us_one_by_one", "front end, one request per message"),
             ("model_process_us_merged", f"model process, {first.get('burst')} merged per message"),
             ("front_end_us_merged", f"front end, {first.get('burst')} merged per message")]
    names = [s for s in ("before", "after") if s in sides] or sorted(sides)
    med = {s: {k: statistics.median(r[k] for r in sides[s]) for k, _ in parts} for s in names}
    rows = []
    for k, label in parts:
        row = [label, *(f"{med[s][k]:.1f}" for s in names)]
        if len(names) == 2:
            row.append(f"**{med['after'][k] / med['before'][k]:.2f}**")
        rows.append(row)
    head = ["CPU µs per request", *names, *(["after/before"] if len(names) == 2 else [])]
    checkouts = {load(p).get("side"): load(p).get("checkout") for p in files}
    note = (f"Medians over {', '.join(f'{len(sides[s])} rounds ({s}, `{checkouts.get(s)}`)' for s in names)}; "
            f"model {first.get('model')}, {first.get('requests')} requests a round.\n\n")
    headline = ""
    if len(names) == 2:
        headline = ("after/before: model process " + ", ".join(
            f"{med['after'][k] / med['before'][k]:.2f}" for k, _ in parts if k.startswith("model_process"))
            + "; front end " + ", ".join(f"{med['after'][k] / med['before'][k]:.2f}"
                                         for k, _ in parts if k.startswith("front_end")))
    return Rendered(provenance(first, files) + note + table(head, rows, set(range(1, len(head)))), headline,
                    where(first))


def generic(files: list[Path]) -> Rendered:
    """Any other file: a .md as it is; a JSON's provenance and its .md side file, else its top-level figures."""
    blocks, wheres = [], []
    for path in files:
        name = rel(path)
        if path.suffix == ".md":
            blocks.append(f"File: `{name}`.\n\n" + path.read_text().strip() + "\n")
            wheres.append(f"`{name}`")
            continue
        if path.suffix != ".json":
            blocks.append(f"File: `{name}`.\n")
            continue
        data = load(path)
        side = path.with_suffix(".md")
        if side.is_file():
            body = side.read_text().strip() + "\n"
        else:
            figures = {k: v for k, v in data.items() if k not in REQUIRED and isinstance(v, int | float | str)}
            body = table(["figure", "value"], [[k, str(v)] for k, v in figures.items()])
        blocks.append(provenance(data, [path]) + "\n" + body)
        wheres.append(where(data))
    return Rendered("\n".join(blocks), f"see the section ({len(files)} file(s))", "; ".join(wheres))


RENDERERS: dict[str, Callable[[list[Path]], Rendered]] = {
    "serve_matrix.json": serve_matrix,
    "searches.json": searches,
    "default-run-summary.json": default_run,
    "default-run-summary.json#train_speedup": default_run_train_speedup,
    "default-run-summary.json#server_vs_limit": default_run_server_vs_limit,
    "default-run-summary.json#batching": default_run_batching,
    "frontier-*.json": frontier,
    "frontends_ipc-*.json": frontends_ipc,
}


def renderer(name: str, view: str | None) -> Callable[[list[Path]], Rendered]:
    key = name.rsplit("/", 1)[-1] + (f"#{view}" if view else "")
    for pattern, fn in RENDERERS.items():
        if key == pattern or fnmatch.fnmatch(key, pattern):
            return fn
    if view:
        raise ValueError(f"no renderer for the view {key!r} (RENDERERS has {sorted(RENDERERS)})")
    return generic


# ------------------------------------------------------------------ the document
def slug(title: str) -> str:
    """The anchor a markdown renderer gives a heading (lower case, punctuation dropped, spaces to hyphens)."""
    return re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-")


def render(source: str | None = None, results: Path = RESULTS) -> str:
    """docs/BENCHMARKS.md's text: targets.md with every directive replaced, and a contents table on top."""
    lines = (SOURCE.read_text() if source is None else source).splitlines()
    out, heading = [], ""
    contents: dict[str, list[tuple[str, str] | None]] = {}  # heading link: each directive's figure
    for line in lines:
        if line.startswith("## ") or line.startswith("### "):
            heading = line.lstrip("#").strip()
        m = DIRECTIVE.match(line.strip())
        if not m:
            out.append(line)
            continue
        name, view, run = m.group("name").strip(), m.group("view"), m.group("run").strip()
        files = pick(name, results)
        link = f"[{heading}](#{slug(heading)})"
        if files:
            r = renderer(name, view)(files)
            out.append(r.block.rstrip("\n") + "\n")
            contents.setdefault(link, []).append((r.headline, r.where))
        else:
            what = f"run `{run}`" if run and run != "-" else "no script in benchmarks/ measures it yet"
            out.append(f"Not measured in a result file kept in the repo: {what}.\n")
            contents.setdefault(link, []).append(None)
    title, rest = out[0], re.sub(r"\n{3,}", "\n\n", "\n".join(out[1:]))
    intro, _, sections = rest.partition("\n## ")
    notice = ("<!-- generated by `python benchmarks/benchmarks_doc.py --write` from benchmarks/targets.md and "
              "benchmarks/results/: edit those, not this file -->")
    history = (f"Figures that no result file in the repo reproduces were removed; the hand-kept journal they "
               f"came from is in git: `git show {JOURNAL}:docs/BENCHMARKS.md`.")
    rows = []
    for link, found in contents.items():
        measured = [f for f in found if f is not None]
        rows.append([link, "; ".join(h for h, _ in measured) or "not measured",
                     "; ".join(dict.fromkeys(w for _, w in measured)) or "–"])
    summary = table(["target", "latest figure", "machine, date"], rows)
    return f"{notice}\n{title}\n{intro.rstrip()}\n\n{history}\n\n{summary}\n## {sections.rstrip()}\n"


def listing(source: str | None = None, results: Path = RESULTS) -> list[str]:
    found = []
    for line in (SOURCE.read_text() if source is None else source).splitlines():
        m = DIRECTIVE.match(line.strip())
        if m:
            files = pick(m.group("name").strip(), results)
            found.append(f"{m.group('name').strip()}: " + (", ".join(rel(p) for p in files)
                                                           or "not measured"))
    return found


def missing_provenance(results: Path = RESULTS) -> dict[str, list[str]]:
    """{result JSON: the keys of machine, command, date it lacks}, for every JSON under results/."""
    gaps = {}
    for path in sorted(results.rglob("*.json")):
        data = json.loads(path.read_text())
        lacking = [k for k in REQUIRED if not (isinstance(data, dict) and data.get(k))]
        if lacking:
            gaps[rel(path)] = lacking
    return gaps


def stamp(path: Path, machine: str, command: str, date: str) -> None:
    """Put machine, command and date first in a result JSON that a product command wrote without them."""
    data = json.loads(path.read_text())
    data = {"machine": machine, "command": command, "date": date,
            **{k: v for k, v in data.items() if k not in REQUIRED}}
    path.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n")


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--write", action="store_true", help="rewrite docs/BENCHMARKS.md")
    g.add_argument("--check", action="store_true", help="exit 1 when docs/BENCHMARKS.md is out of date")
    g.add_argument("--list", action="store_true", help="each directive's result file")
    g.add_argument("--stamp", type=Path, metavar="FILE", help="add machine, command and date to a result JSON")
    p.add_argument("--machine", help="with --stamp: e.g. 'NVIDIA H100 80GB HBM3, Intel Xeon (16 CPUs)'")
    p.add_argument("--command", help="with --stamp: the command that wrote the file")
    p.add_argument("--date", help="with --stamp: YYYY-MM-DD")
    a = p.parse_args(argv)
    if a.stamp:
        if not (a.machine and a.command and a.date):
            p.error("--stamp needs --machine, --command and --date")
        stamp(a.stamp, a.machine, a.command, a.date)
        return 0
    if a.list:
        print("\n".join(listing()))
        return 0
    gaps = missing_provenance()
    if gaps:
        print(f"result files without machine, command or date (add them, e.g. with --stamp): {gaps}",
              file=sys.stderr)
        return 1
    text = render()
    if a.write:
        DOC.write_text(text)
        return 0
    if DOC.read_text() != text:
        print("docs/BENCHMARKS.md is out of date: python benchmarks/benchmarks_doc.py --write", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
