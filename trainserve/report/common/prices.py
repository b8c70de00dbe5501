"""What an hour of hardware and a kWh cost: the report's price assumptions, in one place.

The defaults are public on-demand list prices (docs/run.md, "How to read cost and plan", cites them).
Every price can be replaced with `--price-cpu-core-hour`, `--price-gpu-hour`, `--price-kwh` or a
`--prices FILE` (JSON with the fields of `Prices`); the report states the prices it used beside its
results, so a reader can redo the arithmetic with their own.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass
from pathlib import Path

from trainserve.core.errors import UserError
from trainserve.report.common.price_table import CPU_PRICE

# --- the defaults (the only place they are written) ------------------------------------------
# CPU and GPU list prices live in report/common/price_table.py, keyed by the measured hardware; a GPU has no
# default here: it is priced from the table by its model, or from --price-gpu-hour.
# Electricity: U.S. average retail price to commercial customers in 2022, 12.41 cents per kWh (U.S. EIA).
US_COMMERCIAL_USD_PER_KWH = 0.1241

DEFAULT_SOURCE = (f"CPU: {CPU_PRICE.source}; GPU: the price table entry of the measured GPU (its source is "
                  "stated beside it); 12.41 c/kWh: U.S. EIA average retail price of electricity, commercial sector, "
                  "2022")
DEFAULT_DATE = f"CPU: {CPU_PRICE.date}; GPU: per table entry; EIA electricity: 2022 annual average"
GPU_FROM_TABLE = "the price table's entry for the measured GPU (report/common/price_table.py)"

# the option that sets each price, for messages that name what the user typed
OPTION = {"cpu_core_hour_usd": "--price-cpu-core-hour", "gpu_hour_usd": "--price-gpu-hour", "kwh_usd": "--price-kwh"}


@dataclass(frozen=True)
class Prices:
    """Prices the report multiplies measurements by (USD). One CPU core = one logical CPU (a cloud vCPU)."""

    cpu_core_hour_usd: float = CPU_PRICE.usd_per_hour  # one logical CPU for one hour
    # one GPU (with its share of the host); None: the price table's entry for the measured GPU, if any
    gpu_hour_usd: float | None = None
    kwh_usd: float = US_COMMERCIAL_USD_PER_KWH  # one kilowatt-hour of electricity
    cpu_offer: str = CPU_PRICE.offer
    gpu_offer: str = GPU_FROM_TABLE
    kwh_offer: str = "U.S. average commercial electricity price, 2022 (EIA): 12.41 ¢/kWh"
    source: str = DEFAULT_SOURCE  # where the figures come from
    date: str = DEFAULT_DATE  # when they were list prices

    def __post_init__(self) -> None:
        for name, option in OPTION.items():
            value = getattr(self, name)
            if name == "gpu_hour_usd" and value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
                    or value <= 0:
                shown = f"{value:g}" if isinstance(value, (int, float)) and not isinstance(value, bool) else repr(value)
                raise UserError(f"the price {shown} given with {option} (or {name} in a --prices file) is invalid; "
                                f"give USD {_UNIT[name]}, a number > 0")
        for name in ("cpu_offer", "gpu_offer", "kwh_offer", "source", "date"):
            if not isinstance(getattr(self, name), str):
                raise UserError(f"the prices field {name!r} must be text, not {getattr(self, name)!r}")


def load_prices(path: Path) -> Prices:
    """A --prices FILE: a JSON object with any of Prices' fields (the rest keep their defaults)."""
    try:
        data = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise UserError(f"--prices file {path} does not exist; give a JSON file with cpu_core_hour_usd, "
                        "gpu_hour_usd and/or kwh_usd") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise UserError(f"--prices file {path} is not readable JSON ({e}); give a JSON object such as "
                        '{"gpu_hour_usd": 4.5}') from None
    if not isinstance(data, dict):
        raise UserError(f"--prices file {path} must hold a JSON object such as {{\"gpu_hour_usd\": 4.5}}, "
                        f"not a {type(data).__name__}")
    known = {f.name for f in dataclasses.fields(Prices)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise UserError(f"--prices file {path} has unknown field(s) {', '.join(unknown)}; allowed: "
                        f"{', '.join(sorted(known))}")
    changed = [k for k in OPTION if k in data]
    # a price from the file names the file as its offer, unless the file says which offer it is
    offers = {_OFFER[k]: f"from {Path(path).name}" for k in changed if _OFFER[k] not in data}
    source = {} if "source" in data or not changed else {"source": f"{Path(path).name}; defaults: {DEFAULT_SOURCE}"}
    return dataclasses.replace(Prices(), **(offers | source | data))


_UNIT = {"cpu_core_hour_usd": "per logical CPU per hour", "gpu_hour_usd": "per GPU per hour", "kwh_usd": "per kWh"}
_OFFER = {"cpu_core_hour_usd": "cpu_offer", "gpu_hour_usd": "gpu_offer", "kwh_usd": "kwh_offer"}


def resolve_prices(prices_file: Path | None = None, cpu_core_hour: float | None = None,
                   gpu_hour: float | None = None, kwh: float | None = None) -> Prices:
    """The defaults, then the file's fields, then each option given on the command line."""
    base = load_prices(prices_file) if prices_file is not None else Prices()
    given = {k: v for k, v in (("cpu_core_hour_usd", cpu_core_hour), ("gpu_hour_usd", gpu_hour),
                               ("kwh_usd", kwh)) if v is not None}
    offers = {_OFFER[k]: f"given with {OPTION[k]}" for k in given}
    return dataclasses.replace(base, **given, **offers)
