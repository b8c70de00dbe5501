"""Which trees each command reads, in its --help order: the one table the CLI and docs/options.md share."""

from __future__ import annotations

from trainserve.core.options.common import GlobalOptions
from trainserve.core.options.cost import CostFlags, PlanJob, ReportJob
from trainserve.core.options.diff import DiffJob
from trainserve.core.options.frontier_options import FrontierJob
from trainserve.core.options.load import LoadJob, LocustOptions
from trainserve.core.options.run import RunOptions
from trainserve.core.options.serve import ExportJob, LimitsJob, RepositoryOptions, ServeOptions
from trainserve.core.options.spec import Command, command
from trainserve.core.options.train import CompareJob, ModelOptions, TrainJob, TrainOptions

_NOT_COMPARED = ("device", "lr_scale", "sync_timing", "find_max_batch", "data_placement", "resume", "overwrite",
                 "nproc", "shard", "offload", "scaling_baseline")

COMMANDS: dict[str, Command] = {c.name: c for c in (
    command("trainserve", GlobalOptions),
    command("train", TrainOptions, TrainJob),
    command("compare", TrainOptions, CompareJob, omit=_NOT_COMPARED, epochs=1),
    command("export", ExportJob, RepositoryOptions),
    command("serve", ServeOptions),
    command("load", LoadJob, omit=("http_client",)),
    command("limits", LimitsJob),
    command("frontier", FrontierJob),
    command("report", ReportJob, CostFlags),
    command("plan", PlanJob, CostFlags, required=("qps", "slo_p99_ms")),
    command("diff", DiffJob),
    command("run", ModelOptions, RunOptions, CostFlags),
)}
# Locust's own parser (loadtest/options.py) reads LocustOptions; listed here for docs/options.md
LOCUST = command("locust", LocustOptions)
