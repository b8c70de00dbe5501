"""The prices, the latency SLO and the target load that `run`, `report` and `plan` share.

`slo_p99_ms` is a budget: the p99 a served load point must meet to count (cost at the SLO, the capacity
plan, `load --search`). It is not when `load --ramp` stops stepping up users: that is the load tree's
`ramp_stop_p99_ms`, which starts at the same 100 ms so the ramp reaches the load the plan reads.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from trainserve.core.options.common import RunsDir
from trainserve.core.options.spec import REQUIRED, like, opt


@dataclass(kw_only=True)
class SloOptions:
    """The p99 latency budget, alone: `load --search` takes it too."""

    slo_p99_ms: float = opt(100.0, "p99 latency budget of a served load point (cost at the SLO, break-even, the "
                                   "capacity plan, and the Server scenario's search).", unit="ms", web=True,
                            label="Server search: SLO p99 (ms)",
                            web_help="Server search: the p99 latency, in milliseconds, a rate must meet to count")


@dataclass(kw_only=True)
class CostFlags(SloOptions):
    """Prices, SLO and target load as the command line gives them (report.cost.CostOptions holds them resolved)."""

    # a capacity holds only for the SLO it was searched under: by default the cost and the plan take that one
    slo_p99_ms: float | None = like(SloOptions, "slo_p99_ms", None, help=(
        "p99 latency budget of a served load point (cost at the SLO, break-even, the capacity plan, and the Server "
        "scenario's search). Default: the SLO the run's Server scenario was searched under, else 100; one tighter "
        "than that is refused (search again with it)."))

    prices: Path | None = opt(None, "JSON file with any of cpu_core_hour_usd, gpu_hour_usd, kwh_usd (and "
                                    "cpu_offer, gpu_offer, kwh_offer, source, date); the options below override it.",
                              flags=("--prices",))
    price_cpu_core_hour: float | None = opt(None, "Price of one logical CPU for an hour (default: AWS c5.2xlarge "
                                                  "on-demand ÷ 8 vCPUs).", unit="USD")
    price_gpu_hour: float | None = opt(None, "Price of one GPU for an hour (default: the price table's list price "
                                             "for the measured GPU — H100, H200, A100 — else no price).", unit="USD")
    price_kwh: float | None = opt(None, "Price of a kWh of measured energy (default: U.S. average commercial price, "
                                        "EIA 2022).", unit="USD")
    qps: float | None = opt(None, "Target load, one row per request: the capacity plan sets CPU servers beside "
                                  "GPUs within --slo-p99-ms (report and run add it when given).", unit="requests/s")
    headroom: float = opt(0.2, "Spare capacity the plan keeps above --qps, as a fraction (0.2 = 20%): bursts, a "
                               "server lost.")


@dataclass(kw_only=True)
class ReportJob(RunsDir):
    """`trainserve report`: which run (with CostFlags)."""

    run: str = opt(REQUIRED, "Run whose profile records to report.")
    baseline: str | None = opt(None, "A run to set this one against: the report adds its figures, each change and "
                                     "whether it is beyond the noise (as `trainserve diff BASELINE RUN`).")


@dataclass(kw_only=True)
class PlanJob(RunsDir):
    """`trainserve plan`: which run, and how to print the plan (with CostFlags; --qps and --slo-p99-ms given)."""

    run: str = opt(REQUIRED, "Run whose served load measurements to plan from.")
    as_json: bool = opt(False, 'Print the plan as JSON (summary.json\'s "plan").', flags=("--json",))
