"""`trainserve diff`: two runs (or more) side by side, what changed beyond the noise, and a gate for CI."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from trainserve.commands._typer import Args, options_of


@options_of("diff")
def diff(o: Args) -> None:
    """Set run B (and C, ...) beside the baseline run A: what differs between them, then every figure both have.

    First what differs (host, versions, model card, options), then each figure both runs measured at the
    same operating point: A, B, the change and whether it is beyond the noise (Welch's t where both runs
    have repeats, a run's 95% CI where one has, else the --noise band). Figures only one run has, or that
    the runs measured at other operating points, are listed apart. With --fail-on, exits 1 when a figure
    moved past its threshold beyond the noise.
    """
    from trainserve.core.errors import UserError
    from trainserve.core.fsutil import write_text_atomic
    from trainserve.report.diff.run_diff import diff_runs, load_run, parse_noise
    from trainserve.report.diff.diff_gate import breaches, parse_fail_on
    from trainserve.report.diff.diff_render import as_json, print_terminal, write_files

    if len(o.runs) < 2:
        raise UserError("trainserve diff needs two runs or more: the baseline A, then each run to set beside it")
    noise = parse_noise(o.noise)
    thresholds = parse_fail_on(o.fail_on) if o.fail_on is not None else []
    base_info, base = load_run(o.runs[0], o.runs_dir)
    diffs = [diff_runs(base_info, base, *load_run(spec, o.runs_dir), noise_pct=noise) for spec in o.runs[1:]]
    broken = [line for d in diffs for line in breaches(d, thresholds)]
    to_stdout = o.as_json is not None and str(o.as_json) == "-"
    for d in diffs:
        if not to_stdout:
            print_terminal(d)
        for path in write_files(d, _per_run(o.html, d.b.name, len(diffs)), _per_run(o.md, d.b.name, len(diffs))):
            typer.echo(f"written: {path}", err=to_stdout)
    if o.as_json is not None:
        text = json.dumps(as_json(diffs, broken), indent=1)
        if to_stdout:
            typer.echo(text)
        else:
            write_text_atomic(o.as_json, text + "\n")
            typer.echo(f"written: {o.as_json}")
    if thresholds:
        for line in broken:
            typer.secho(f"gate: {line}", err=True, fg="red")
        if broken:
            raise typer.Exit(code=1)
        typer.echo(f"gate: passed ({', '.join(map(str, thresholds))}: no figure past its threshold beyond the noise)",
                   err=to_stdout)


def _per_run(path: Path | None, run: str, count: int) -> Path | None:
    """With several runs beside A, one file each: report.html -> report.<run>.html."""
    if path is None or count == 1:
        return path
    return path.with_name(f"{path.stem}.{run}{path.suffix}")
