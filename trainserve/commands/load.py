"""`trainserve load`: a headless Locust load test against a KServe v2 server (Triton or ours)."""

from __future__ import annotations

from typing import Annotated

import typer

from trainserve.commands.choices import Protocol, RunsDirOpt, Validation
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


def load(
    url: Annotated[str, typer.Option(help="HOST:PORT of the server's endpoint for --protocol (HTTP 8000, gRPC 8001).")],
    model: Annotated[str, typer.Option(help="Served model name, e.g. cnn_cpu.")],
    protocol: Annotated[Protocol, typer.Option(help="http (binary tensors) or grpc.")] = Protocol("http"),
    users: Annotated[int | None, typer.Option(help="Closed loop: concurrent users (default 1).")] = None,
    rate: Annotated[float | None, typer.Option(help="Open loop: Poisson arrivals per second.")] = None,
    duration: Annotated[str, typer.Option(help="Run time, e.g. 30s or 2m (with --ramp: the upper bound).")] = "30s",
    batch: Annotated[int, typer.Option(help="Rows per request.")] = 1,
    processes: Annotated[int, typer.Option(help=(
        "Locust processes on this machine (master + workers); 0: enough for the target within the free cores."))] = 0,
    ramp: Annotated[bool, typer.Option(help="Step users up until the p99 SLO breaks or throughput stops growing.")] = False,
    search: Annotated[bool, typer.Option(help=(
        "Server scenario: search the highest Poisson rate whose p99 (from the scheduled send time) meets "
        "--slo-p99-ms with <= 0.1% errors; --rate is the first rate tried, --duration the search's budget."))] = False,
    slo_p99_ms: Annotated[float, typer.Option(help="Ramp and search: p99 latency SLO in ms.")] = 100.0,
    warmup_s: Annotated[float, typer.Option("--warmup-s", help=(
        "Seconds after the first request not counted (not with --ramp)."))] = 1.0,
    window_s: Annotated[float, typer.Option("--window-s", help=(
        "Measurement window, s: a figure is stable when 3 consecutive windows agree within 10%."))] = 1.0,
    search_probe_s: Annotated[float, typer.Option("--search-probe-s", help=(
        "Search: most seconds of windows per rate tried."))] = 4.0,
    repeats: Annotated[int, typer.Option(help="Run the measurement N times; the report shows mean and 95% CI.")] = 1,
    ramp_step_s: Annotated[float, typer.Option(help="Ramp: seconds per step.")] = 10.0,
    ramp_max_users: Annotated[int, typer.Option(help="Ramp: most users.")] = 64,
    run: Annotated[str, typer.Option(help="Run name: results go to <runs-dir>/<run>/load/.")] = "default",
    runs_dir: RunsDirOpt = None,
    target: Annotated[str | None, typer.Option(help="Name of the result file and record (default: derived).")] = None,
    metrics_url: Annotated[str | None, typer.Option(help="Server's Prometheus URL (default http://HOST:8002/metrics).")] = None,
    input_data: Annotated[str, typer.Option(help="'random' or an .npz with arrays named after the inputs.")] = "random",
    validate: Annotated[Validation, typer.Option(help=(
        "Check responses: shape (shape and dtype), or values (needs --expected-output)."))] = Validation("off"),
    expected_output: Annotated[str, typer.Option(help="With --validate values: .npz of the expected outputs.")] = "",
) -> None:
    """Drive load at a KServe v2 server with Locust (headless) and write runs/<run>/load/<target>.json.

    Closed loop with --users, open loop (Poisson arrivals, latency from the scheduled send time)
    with --rate, or a step ramp with --ramp. The server's Prometheus metrics are scraped meanwhile.
    """
    from trainserve.loadtest.runner import LoadConfig, run_load

    config = LoadConfig(url=url, model=model, protocol=protocol.value, users=users, rate=rate,
                        duration_s=parse_duration(duration), batch=batch, processes=processes, ramp=ramp,
                        run=run, runs_dir=runs_dir, target=target, metrics_url=metrics_url, input_data=input_data,
                        validate=validate.value, expected_output=expected_output, slo_p99_ms=slo_p99_ms,
                        ramp_step_s=ramp_step_s, ramp_max_users=ramp_max_users, search=search, warmup_s=warmup_s,
                        window_s=window_s, search_probe_s=search_probe_s, repeats=repeats)
    path, record = run_load(config)
    lat = record.speed.latency
    found = record.extra.get("search")
    if found is not None:
        typer.echo(f"Server scenario: {found['capacity_req_s']} req/s within p99 <= {slo_p99_ms:g} ms "
                   f"({found['stop_reason']})")
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
