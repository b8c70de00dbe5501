"""Which meter a power, energy or memory figure comes from, and on which device (docs/telemetry.md, "Meters").

A figure about a device takes only that device's meters: NVML for a GPU; RAPL for a CPU, or where RAPL
cannot be read an estimate that says so. `energy_status` is the one judgement of an energy figure that
every table (the side-by-side columns, the cost rows) reads, so no two tables can disagree on a record.

The CPU estimate is the method CodeCarbon uses in its process mode: the package's TDP × the measured
process's CPU time over the wall time, divided by the host's logical CPUs (so a process keeping every
logical CPU busy draws the TDP). CodeCarbon itself is not a dependency: it pulls a web stack (pandas,
pydantic, authlib, dash) for one multiplication, and looks TDPs up in a table; the few TDPs here are the
vendors' datasheet figures for the CPUs of the hosts this project runs on, and an unknown CPU takes
CodeCarbon's own default (85 W), which its meter name states.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

EnergyStatus = Literal["measured", "estimated", "not measured"]

# Energy sources a record may carry (ProfileRecord.energy.source), by the device each one measures.
NVML = "nvml"  # the GPU's total-energy counter
NVML_POWER = "nvml-power"  # the GPU's power readings, integrated (no energy counter on that GPU)
RAPL = "rapl"  # the CPU packages' energy counters
ESTIMATE = "estimate"  # the CPU's TDP × its measured utilisation: not a meter
SOURCE_DEVICE: dict[str, str] = {NVML: "cuda", NVML_POWER: "cuda", RAPL: "cpu", ESTIMATE: "cpu"}

RAPL_METER = "RAPL package counters"
PROCESS_RSS = "process RSS (psutil)"
TORCH_ALLOCATOR = "torch CUDA allocator (max_memory_allocated)"

# CodeCarbon's TDP for a CPU it does not know (watts).
DEFAULT_TDP_W = 85.0
# Datasheet TDPs (watts) of the CPUs this project's hosts have carried, matched as substrings of the
# model name /proc/cpuinfo gives; the most specific name first.
TDP_W: tuple[tuple[str, float], ...] = (
    ("Xeon Platinum 8480", 350.0), ("Xeon Platinum 8470", 350.0), ("Xeon Platinum 8468", 350.0),
    ("Xeon Platinum 8462Y", 300.0), ("Xeon Platinum 8558", 330.0), ("Xeon Platinum 8380", 270.0),
    ("Xeon Platinum 8375C", 300.0), ("Xeon Platinum 8259CL", 210.0), ("Xeon Gold 6448Y", 225.0),
    ("EPYC 9654", 360.0), ("EPYC 9554", 360.0), ("EPYC 9534", 280.0), ("EPYC 9454", 290.0),
    ("EPYC 7763", 280.0), ("EPYC 7J13", 280.0), ("EPYC 7V13", 280.0), ("EPYC 7R13", 280.0),
)


def nvml_meter(index: int) -> str:
    return f"NVML device {index}"


def gpu_device(index: int) -> str:
    return f"cuda:{index}"


def energy_status(device: str, source: str | None) -> EnergyStatus:
    """How a record's energy figure stands for its own device: its device's meter read it ("measured"),
    the CPU estimate gave it ("estimated"), or neither ("not measured": no source, or another device's)."""
    if source is None or SOURCE_DEVICE.get(source) != device:
        return "not measured"
    return "estimated" if source == ESTIMATE else "measured"


def energy_note(device: str, source: str | None) -> str:
    """Why a record has no energy figure of its own device, in one phrase."""
    if source and SOURCE_DEVICE.get(source) not in (None, device):
        return f"not measured: the record's energy is {source.upper()}'s, not the {_label(device)}'s"
    return "not measured" + (" (no RAPL counter readable, no CPU utilisation)" if device == "cpu"
                             else " (no NVML energy)")


@dataclass(frozen=True)
class CpuEstimate:
    """The CPU's power estimated from its TDP and the measured utilisation (not a meter reading)."""

    power_w: float  # mean watts over the window
    tdp_w: float
    tdp_known: bool  # False: CodeCarbon's default TDP, the CPU model being unknown
    utilisation: float  # 0..1 of all logical CPUs

    @property
    def meter(self) -> str:
        tdp = f"TDP {self.tdp_w:g} W" + ("" if self.tdp_known else " (default: CPU model unknown)")
        return f"estimate: {tdp} × process CPU utilisation {self.utilisation:.1%}"


def cpu_tdp_w(cpu_model: str | None) -> tuple[float, bool]:
    """(TDP in watts, whether the CPU model was known) for the model name /proc/cpuinfo gives."""
    plain = " ".join((cpu_model or "").replace("(R)", " ").replace("(TM)", " ").lower().split())
    for name, watts in TDP_W:
        if plain and name.lower() in plain:
            return watts, True
    return DEFAULT_TDP_W, False


def estimate_cpu_power(process_percent: float | None, logical_cpus: int | None,
                       cpu_model: str | None) -> CpuEstimate | None:
    """TDP × the process's share of the host's logical CPUs; None without a utilisation or a CPU count.

    `process_percent`: the measured process with its children, 100 = one logical CPU busy."""
    if process_percent is None or not logical_cpus:
        return None
    tdp, known = cpu_tdp_w(cpu_model)
    share = min(1.0, max(0.0, process_percent / 100.0 / logical_cpus))
    return CpuEstimate(power_w=round(tdp * share, 4), tdp_w=tdp, tdp_known=known, utilisation=share)


def host_cpu_model() -> str | None:
    """The CPU's model name as /proc/cpuinfo gives it, or None where it cannot be read."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def _label(device: str) -> str:
    return "GPU" if device == "cuda" else "CPU"
