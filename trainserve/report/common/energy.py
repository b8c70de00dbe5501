"""A record's energy as every table of the report shows it: the side-by-side columns, the scenarios and the
cost rows all read `own_energy`, so none can call a figure measured that another calls not measured."""

from __future__ import annotations

from dataclasses import dataclass

from trainserve.core.meters import EnergyStatus, energy_status
from trainserve.core.profile import ProfileRecord

ESTIMATED = "estimated"


@dataclass(frozen=True)
class OwnEnergy:
    """A record's energy figures as every table shows them: null unless its own device's meter (or the CPU
    estimate) gave them."""
    status: EnergyStatus
    mean_power_w: float | None
    energy_j: float | None
    energy_per_sample_j: float | None
    meter: str | None  # "NVML device 0 (cuda:0)"


NO_ENERGY = OwnEnergy("not measured", None, None, None, None)


def own_energy(r: ProfileRecord) -> OwnEnergy:
    e = r.energy
    status = energy_status(r.device, e.source)
    if status == "not measured":
        return NO_ENERGY
    per_sample = e.energy_per_sample_j
    if per_sample is None and e.energy_j is not None and r.validity.samples > 0:
        per_sample = e.energy_j / r.validity.samples
    meter = e.meter or e.source
    return OwnEnergy(status, e.mean_power_w, e.energy_j, per_sample,
                     f"{meter} ({e.device})" if e.device else meter)


def marked(text: str, status: str) -> str:
    """A formatted energy or power figure as a table shows it: "not measured" without one, an estimate
    marked as such."""
    if status == "not measured":
        return "not measured"
    return f"≈ {text} ({ESTIMATED})" if status == ESTIMATED else text
