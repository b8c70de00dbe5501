"""The GPU price at which serving on GPUs costs the same as on CPU servers, at one load.

The cost comparison flips with the GPU's price, so the report states the price it flips at: at the load L
(the plan's target, else what one GPU carries within the SLO), CPU servers cost ceil(L / cpu capacity) ×
their price per hour and GPUs ceil(L / gpu capacity) × p; the GPU is the cheaper side for every p below
CPU cost ÷ GPUs. Capacities are the most one-row requests/s one server sustained within the SLO
(report/cost/cost_per_million.py); more servers than one assume capacity adds up (linear scaling), as the plan does.
"""

from __future__ import annotations

import math

from trainserve.report.common.cost_sections import GpuPriceBreakEven


def servers_needed(load: float, capacity: float) -> int:
    """Servers of `capacity` each that carry `load` (at least one)."""
    return max(1, math.ceil(load / capacity - 1e-9))  # k × capacity itself is k servers despite rounding


def gpu_price_break_even(cpu_capacity: float | None, cpu_usd_per_hour: float | None, gpu_capacity: float | None,
                         gpu_usd_per_gpu_hour: float | None, planned_req_s: float | None) -> GpuPriceBreakEven:
    """`planned_req_s`: the plan's target (qps × (1 + headroom)); None: one GPU's capacity within the SLO."""
    missing = [what for what, v in (("CPU server's capacity within the SLO", cpu_capacity),
                                    ("CPU server's price", cpu_usd_per_hour),
                                    ("GPU's capacity within the SLO", gpu_capacity)) if not v]
    if missing:
        return GpuPriceBreakEven(None, None, None, None, None, None, gpu_usd_per_gpu_hour, None,
                                 "not computed: no " + " and no ".join(missing) + " was measured or given")
    assert cpu_capacity and cpu_usd_per_hour and gpu_capacity  # none is missing
    load = planned_req_s if planned_req_s else gpu_capacity
    n_cpu, n_gpu = servers_needed(load, cpu_capacity), servers_needed(load, gpu_capacity)
    price = n_cpu * cpu_usd_per_hour / n_gpu
    return GpuPriceBreakEven(load_req_s=load, load_basis="plan" if planned_req_s else "one GPU's capacity",
                             cpu_servers=n_cpu, cpu_usd_per_hour=n_cpu * cpu_usd_per_hour, gpus=n_gpu,
                             break_even_usd_per_gpu_hour=price, gpu_usd_per_gpu_hour=gpu_usd_per_gpu_hour,
                             gpu_cheaper=None if gpu_usd_per_gpu_hour is None else gpu_usd_per_gpu_hour < price,
                             note=None)
