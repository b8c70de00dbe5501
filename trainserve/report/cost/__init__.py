"""What the measurements cost: per million samples and inferences, the GPU price at break-even, the capacity
plan, their chart and their part of the page. The options are exported here for the pipeline and the commands."""

from trainserve.report.cost.cost_per_million import DEFAULT_SLO_P99_MS, CostOptions

__all__ = ["DEFAULT_SLO_P99_MS", "CostOptions"]
