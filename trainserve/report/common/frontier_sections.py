"""The memory frontier's section, field by field: each device's largest model that fits, per series
(memory/memory_frontier.py builds it from `trainserve frontier`'s results). Here, beside the report's other typed
sections, because the Report holds it."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class SeriesEdge:
    """One series' largest size that fits the device."""

    series: str
    mode: str  # train | infer
    precision: str
    checkpointing: bool
    measured_params: int | None  # the largest measured size that fit
    edge_params: int | None  # the largest that fits: measured, or the fit's prediction
    # "measured" | "predicted" | "predicted, checked" (the next size failed) | "checked, at least" (no larger size
    # failed yet) | "predicted, did not fit when measured" | "predicted, at least"
    edge_source: str
    edge_bytes: int | None  # its peak (measured or predicted)
    stopped_at_params: int | None  # the first size that did not fit, when one was met
    fit_max_rel_error: float | None


@dataclass
class DeviceFrontier:
    """One device's frontier as the report shows it."""

    device: str
    device_name: str
    capacity_bytes: int | None
    capacity_source: str
    batch_size: int
    series: list[SeriesEdge] = field(default_factory=list)
    sentence: str = ""
    notes: list[str] = field(default_factory=list)
    source: str = ""  # the result file, relative to the run
