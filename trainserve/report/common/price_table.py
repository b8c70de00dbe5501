"""List prices keyed by the hardware that was measured: one GPU of a known model, or one vCPU.

Each entry is a published on-demand list price (after AWS's June 2025 cuts to its P4 and P5 instances),
with where it was read and when. The report prices a GPU from the entry whose model its device name
names ("NVIDIA H200" → H200); a GPU with no entry is priced only from the user's `--price-gpu-hour`,
otherwise its cost says "no price" — never another GPU's price. The figures are written here once;
docs/run.md cites them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class ListPrice:
    """One list price: USD per GPU-hour (a GPU entry) or per vCPU-hour (the CPU entry)."""

    key: str  # what the measured device is matched by ("H100", "A100 80GB", "CPU")
    usd_per_hour: float  # one GPU, with its share of the host (CPUs, memory), or one vCPU
    offer: str  # the instance it is divided from
    source: str  # where the instance price was read
    date: str  # when it was read or published


# AWS on-demand, US East (N. Virginia). A GPU-hour is the instance price ÷ its GPUs, so it carries the GPU's
# share of the host. The p5 and p4d/p4de figures are the post-June-2025 on-demand rates.
_DATARECEIPTS = ("datareceipts/data-receipts, 109-gpu-pricing/hyperscalers.json (AWS rows, us-east-1, read from "
                 "the AWS price list)")
GPU_PRICES: tuple[ListPrice, ...] = (
    ListPrice("H200", 63.296 / 8, "AWS p5en.48xlarge (8× H200 141 GB) on-demand, US East (N. Virginia): "
              "$63.296/h ÷ 8 GPUs",
              "dstack pull request #4110 ('Add AWS p5en.48xlarge'), `dstack offer -b aws --instance-type "
              "p5en.48xlarge` on-demand rows (us-east-1, us-east-2, us-west-2: $63.296)", "2026-08-06"),
    ListPrice("H100", 55.04 / 8, "AWS p5.48xlarge (8× H100 80 GB) on-demand, US East (N. Virginia): "
              "$55.04/h ÷ 8 GPUs", _DATARECEIPTS, "retrieved 2026-11-09"),
    ListPrice("A100 80GB", 27.44705 / 8, "AWS p4de.24xlarge (8× A100 80 GB) on-demand, US East (N. Virginia): "
              "$27.44705/h ÷ 8 GPUs", _DATARECEIPTS, "retrieved 2026-11-09"),
    ListPrice("A100", 21.957642 / 8, "AWS p4d.24xlarge (8× A100 40 GB) on-demand, US East (N. Virginia): "
              "$21.957642/h ÷ 8 GPUs", _DATARECEIPTS, "retrieved 2026-11-09"),
)
# No L4 entry: no dated list price for an L4 instance was found to cite; an L4 needs --price-gpu-hour.

CPU_PRICE = ListPrice("CPU", 0.34 / 8, "AWS c5.2xlarge (8 vCPUs, Intel Xeon) on-demand, US East (N. Virginia): "
                      "$0.34/h ÷ 8 vCPUs",
                      "AWS EC2 Auto Scaling User Guide, 'Spot price per unit hour example', On-Demand column "
                      "(the guide calls its figures example pricing)", "as published up to Q1 2026")


def _pattern(key: str) -> re.Pattern[str]:
    model, _, memory = key.partition(" ")
    # a whole word: "GH200" is not an H200; "A100 80GB" needs the memory somewhere after the model
    return re.compile(rf"\b{model}\b" + (rf".*\b{memory[:-2]}\s*GB" if memory else ""), re.IGNORECASE)


def gpu_entry(device_name: str | None) -> ListPrice | None:
    """The table's entry for a measured GPU ("NVIDIA H100 80GB HBM3" → H100), or None when it has none."""
    if not device_name:
        return None
    return next((e for e in GPU_PRICES if _pattern(e.key).search(device_name)), None)


@dataclass(frozen=True)
class GpuPrice:
    """The price one GPU of a model's measurements is charged, and where it comes from (summary.json's
    costs.models.<m>.gpu_price)."""

    device_name: str | None  # as torch/NVML named it; None: not recorded
    usd_per_gpu_hour: float | None  # None: no price
    origin: str  # "user" (--price-gpu-hour or a --prices file), "table" (an entry above) or "none"
    offer: str | None  # the instance or option the price comes from
    source: str | None  # where a table price was read
    date: str | None  # when a table price was read or published
    note: str | None  # why there is no price


def gpu_pricing(device_name: str | None, user_usd_per_gpu_hour: float | None, user_offer: str) -> GpuPrice:
    """The price one GPU of a model's measurements is charged, and why: the user's, else the table's, else none."""
    if user_usd_per_gpu_hour is not None:
        return GpuPrice(device_name, user_usd_per_gpu_hour, "user", user_offer, None, None, None)
    entry = gpu_entry(device_name)
    if entry is not None:
        return GpuPrice(device_name, entry.usd_per_hour, "table", entry.offer, entry.source, entry.date, None)
    known = ", ".join(e.key for e in GPU_PRICES)
    return GpuPrice(device_name, None, "none", None, None, None,
                    f"no price: the price table has no entry for {device_name or 'this GPU'} (it has {known}); "
                    "give --price-gpu-hour")
