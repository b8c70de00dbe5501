"""The GPU price at which serving on GPUs costs the same as on CPU servers, at one load.

The cost comparison flips with the GPU's price, so the report states the price it flips at: at the load L
(the plan's target, else what one GPU carries within the SLO), CPU servers cost ceil(L / cpu capacity) ×
their price per hour and GPUs ceil(L / gpu capacity) × p; the GPU is the cheaper side for every p below
CPU cost ÷ GPUs. Capacities are the most one-row requests/s one server sustained within the SLO
(report/cost.py); more servers than one assume capacity adds up (linear scaling), as the plan does.
"""

from __future__ import annotations

import math
from typing import Any

from trainserve.report import units as u


def _servers(load: float, capacity: float) -> int:
    return max(1, math.ceil(load / capacity - 1e-9))  # k × capacity itself is k servers despite rounding


def gpu_price_break_even(cpu_capacity: float | None, cpu_usd_per_hour: float | None, gpu_capacity: float | None,
                         gpu_usd_per_gpu_hour: float | None, planned_req_s: float | None) -> dict[str, Any]:
    """summary.json's costs.models.<m>.gpu_price_break_even.

    `planned_req_s`: the plan's target (qps × (1 + headroom)); None: one GPU's capacity within the SLO."""
    out: dict[str, Any] = {"load_req_s": None, "load_basis": None, "cpu_servers": None, "cpu_usd_per_hour": None,
                           "gpus": None, "break_even_usd_per_gpu_hour": None,
                           "gpu_usd_per_gpu_hour": gpu_usd_per_gpu_hour, "gpu_cheaper": None, "note": None}
    missing = [what for what, v in (("CPU server's capacity within the SLO", cpu_capacity),
                                    ("CPU server's price", cpu_usd_per_hour),
                                    ("GPU's capacity within the SLO", gpu_capacity)) if not v]
    if missing:
        return out | {"note": "not computed: no " + " and no ".join(missing) + " was measured or given"}
    load = planned_req_s if planned_req_s else gpu_capacity
    n_cpu, n_gpu = _servers(load, cpu_capacity), _servers(load, gpu_capacity)
    price = n_cpu * cpu_usd_per_hour / n_gpu
    return out | {"load_req_s": load, "load_basis": "plan" if planned_req_s else "one GPU's capacity",
                  "cpu_servers": n_cpu, "cpu_usd_per_hour": n_cpu * cpu_usd_per_hour, "gpus": n_gpu,
                  "break_even_usd_per_gpu_hour": price,
                  "gpu_cheaper": None if gpu_usd_per_gpu_hour is None else gpu_usd_per_gpu_hour < price}


def sentence(name: str, be: dict[str, Any], gpu_label: str) -> str:
    """The break-even price in words, with where the GPU's own price stands."""
    if be["break_even_usd_per_gpu_hour"] is None:
        return f"{name}: GPU price break-even — {be['note']}."
    where = ("the planned" if be["load_basis"] == "plan" else "one GPU's capacity within the SLO,")
    p = be["break_even_usd_per_gpu_hour"]
    text = (f"{name}: at {where} {be['load_req_s']:,.0f} req/s, {be['gpus']} GPU{'s' if be['gpus'] > 1 else ''} "
            f"cost{'' if be['gpus'] > 1 else 's'} less than {be['cpu_servers']} CPU server{'s' if be['cpu_servers'] > 1 else ''} "
            f"({u.cents(be['cpu_usd_per_hour'])}/h) below {u.cents(p)} per GPU-hour")
    own = be["gpu_usd_per_gpu_hour"]
    if own is None:
        return text + f"; the {gpu_label} has no price."
    verdict = "cheaper" if be["gpu_cheaper"] else "dearer"
    return text + f"; at its price of {u.cents(own)} per GPU-hour the {gpu_label} is {verdict}."
