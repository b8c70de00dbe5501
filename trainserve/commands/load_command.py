"""`trainserve load`: a headless Locust load test against a KServe v2 server (Triton or ours)."""

from __future__ import annotations

import typer

from trainserve.commands._typer import Args, options_of
from trainserve.core.errors import UserError


def parse_duration(text: str) -> float:
    """'30s', '2m', '1h30m' or a plain number of seconds -> seconds."""
    import re

    t = text.strip()
    if re.fullmatch(r"\d+(\.\d+)?", t):
        return float(t)
    parts = re.findall(r"(\d+(?:\.\d+)?)([hms])", t)
    if not parts or "".join(n + u for n, u in parts) != t:
        raise UserError(f"--duration {text!r} is not a duration; use e.g. 30s, 2m or 1h30m")
    return sum(float(n) * {"h": 3600, "m": 60, "s": 1}[u] for n, u in parts)


@options_of("load")
def load(o: Args) -> None:
    """Drive load at a KServe v2 server with Locust (headless) and write runs/<run>/load/<target>.json.

    Closed loop with --users, open loop (Poisson arrivals, latency from the scheduled send time)
    with --rate, or a step ramp with --ramp, or the Server scenario's search with --search. The server's
    Prometheus metrics are scraped meanwhile.
    """
    from trainserve.loadtest.runner import LoadConfig, run_load

    if o.ramp and "slo_p99_ms" in o.given:  # two meanings, two names: a budget is not a stopping rule
        raise UserError(f"--slo-p99-ms is the latency budget of --search and the cost report, not when --ramp "
                        f"stops; pass --ramp-stop-p99-ms {o.slo_p99_ms:g} instead")
    config = LoadConfig(**o.of(LoadConfig, duration_s=None if o.duration_s is None else parse_duration(o.duration_s)))
    path, record = run_load(config)
    lat = record.speed.latency
    found = record.extra.get("search")
    if found is not None:
        limited = " at least" if found.get("lower_bound") and found.get("capacity_req_s") else ""
        typer.echo(f"Server scenario:{limited} {found['capacity_req_s']} req/s within p99 <= {config.slo_p99_ms:g} ms "
                   f"({found['stop_reason']}{'; the client limited it' if found.get('client_limited') else ''})")
    typer.echo(f"{record.speed.requests_s} req/s, {record.speed.throughput_samples_s} samples/s, "
               f"p50 {lat.p50_ms} ms, p95 {lat.p95_ms} ms, p99 {lat.p99_ms} ms, p99.9 {lat.p999_ms} ms -> {path}")
    served = record.served
    if served is not None and served.attribution is not None:
        typer.echo(served.attribution.line())
    if served is not None and served.bound is not None:
        typer.echo(f"bounded by {served.bound.detail}")
    stability = record.validity.stability
    if stability and not stability.get("stable"):
        typer.secho(f"warning: {stability['reason']}", err=True, fg="yellow")
    for w in record.validity.warnings:
        typer.secho(f"warning: {w}", err=True, fg="yellow")
