"""`trainserve run`, the main job: train, export, serve on the CPU (and the GPU), load, report.

Every stage is the stage's own CLI in a child process (docs/architecture.md: stages talk through
artifacts on disk and the network, never by importing each other), logged to
`runs/<run>/logs/<stage>.log`.
Servers listen on free loopback ports read back from their ready line. Whatever happens — success,
a failing stage, Ctrl-C, SIGTERM — every child is stopped before this returns.
"""

from __future__ import annotations

import datetime as _dt
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainserve.core.bounds import NOBATCH_SUFFIX
from trainserve.core.errors import UserError
from trainserve.core.fsutil import write_json_atomic
from trainserve.core.options.run import RUN_DEVICES, RunOptions
from trainserve.core.options.train import ModelOptions
from trainserve.core.procs import (
    ChildFailed,
    Children,
    child_env,
    interrupts_stop_children,
    trainserve_argv,
    wait_ready,
)
from trainserve.core.profile import ProfileRecord
from trainserve.core.runs import run_dir
from trainserve.core.servedparts import LoadParts
from trainserve.core.speedup import pick_train
from trainserve.core.telemetry import gpu_memory_used_bytes
from trainserve.loadtest.clientcpu import process_cap
from trainserve.report import write_report
from trainserve.report.cost import DEFAULT_SLO_P99_MS
from trainserve.train.models import FAMILIES
from trainserve.train.onnx_only import card_from_onnx, onnx_model_name
from trainserve.train.usermodel import cli_args

if TYPE_CHECKING:
    from trainserve.report.cost import CostOptions

log = logging.getLogger(__name__)

MODELS = FAMILIES
# the load stages of each served device, in their order; "server-nobatch" is the Server scenario on the same model
# with batching off (`trainserve export` writes `<model>_<kind>_nobatch`), what dynamic batching is judged by;
# "shared-rate" and its nobatch twin offer both the same open-loop rate, so their p99s stand side by side
SCENARIOS = ("ramp", "server", "batch1", "saturated", "server-nobatch", "shared-rate", "shared-rate-nobatch")
SHARED_RATE_SHARE = 0.8  # the shared rate: this share of the lower of the two variants' Server capacities
RUN_OPTIONS = "run.json"  # the options that decide a run's work (--resume checks them)
STAGES = "stages.json"  # the stages that completed, with their seconds (--resume keeps them)


@dataclass(frozen=True)
class Budget:
    """How much work each stage does: --quick (< 3 min on 2 cores) or the default (< 10 min)."""

    preset_cpu: str  # model size preset when --preset is not given and training runs on the CPU
    preset_gpu: str  # ... and when it runs on the GPU
    train_samples: int  # synthetic training rows on the CPU
    train_samples_gpu: int  # ... on the GPU, where a few thousand rows pass in well under a second
    train_epochs: int
    train_batch: int
    warmup_steps: int  # training steps left out of the step-time statistics
    compare_steps: int  # CPU-vs-GPU training comparison, steps per device (GPU machines only)
    accuracy_epochs: int  # the epoch budget of training to --target-accuracy (it stops once reached)
    export_eval_samples: int  # evaluation rows for each exported variant's accuracy
    ramp_step_s: float  # seconds per load-ramp step
    ramp_max_users: int
    measure_s: float  # batch-1 and saturated measurements, seconds each
    saturate_users: int  # concurrent users of the saturating measurement
    saturate_batch: int  # rows per request of the saturating measurement (<= export's max batch 64)
    stage_timeout_s: float  # a stage running longer than this is stopped and reported
    search_budget_s: float = 10.0  # the Server scenario's capacity search, seconds per device
    search_probe_s: float = 2.0  # ... most seconds of windows per rate tried
    # a GPU server's search starts from its own closed-loop probe at enough users (trainserve load's default) and
    # takes this budget: the ramp's few users set a start far below a GPU's capacity, and doubling from there
    # spends the search's time before it brackets (None: from the ramp, in the CPU's budget)
    search_budget_gpu_s: float | None = None
    shared_rate_s: float = 10.0  # batching on and off at one shared open-loop rate, seconds each
    window_s: float = 0.5  # measurement windows of every load figure (3 must agree within 10%)
    warmup_s: float = 0.5  # not counted, before each load figure (and each rate of the search)
    limits_budget_s: float = 3.0  # in-process onnxruntime limits (trainserve limits), seconds per device
    limits_points: str = "all"  # trainserve limits --points: "served" spends a short budget on the compared points
    sweep_budget_s: float = 60.0  # training sweep: seconds per device (--sweep-budget-s overrides)
    # the memory frontier (trainserve frontier): the transformer's d_model sizes on the CPU, and seconds per device;
    # a CPU has no capacity, so its points stay small (they show the curve, not an edge)
    frontier_sizes_cpu: str = "64,128,192,256"
    frontier_budget_s: float = 60.0


QUICK = Budget(preset_cpu="tiny", preset_gpu="tiny", train_samples=640, train_samples_gpu=8192, train_epochs=1,
               train_batch=64, warmup_steps=2, compare_steps=20, accuracy_epochs=10, export_eval_samples=256, ramp_step_s=3.0,
               ramp_max_users=8, measure_s=4.0, saturate_users=4, saturate_batch=64, stage_timeout_s=150.0,
               sweep_budget_s=25.0, shared_rate_s=3.0, limits_budget_s=4.0, limits_points="served", frontier_sizes_cpu="32,64",
               frontier_budget_s=8.0)
# cnn/small takes ~20 s per batch-128 training step on 2 busy cores, so a CPU-only machine trains tiny
FULL = Budget(preset_cpu="tiny", preset_gpu="small", train_samples=4096, train_samples_gpu=32768, train_epochs=2,
              train_batch=128, warmup_steps=5, compare_steps=20, accuracy_epochs=30, export_eval_samples=1024, ramp_step_s=8.0,
              ramp_max_users=32, measure_s=20.0, saturate_users=8, saturate_batch=64, stage_timeout_s=420.0,
              limits_budget_s=15.0, search_budget_s=40.0, search_probe_s=5.0, window_s=1.0, warmup_s=1.0,
              search_budget_gpu_s=60.0)


@dataclass(kw_only=True)
class RunConfig(RunOptions):
    """What `trainserve run` does: RunOptions (trainserve/core/options/run.py: each option's default and
    meaning), the model, and the cost options resolved."""

    model: str = ModelOptions.model  # zoo family, or your own: path/to/file.py:build (train/usermodel.py)
    user_model: dict[str, Any] = field(default_factory=dict)  # your own model: TrainConfig's input_shape, ...
    cost: CostOptions | None = None  # prices, SLO and target load of the report's cost section; None: defaults

    def __post_init__(self) -> None:
        if self.sweep_budget_s is not None and not self.sweep_budget_s > 0:
            raise UserError(f"--sweep-budget-s {self.sweep_budget_s:g} is invalid; give the seconds each device's "
                            "sweep may take (a number > 0), or pass --no-sweep")
        if self.target_accuracy is not None and not 0 < self.target_accuracy <= 1:
            raise UserError(f"--target-accuracy {self.target_accuracy:g} is invalid; give a held-out accuracy "
                            "above 0 and at most 1, e.g. 0.95")
        if not (isinstance(self.repeats, int) and 1 <= self.repeats <= 20):
            raise UserError(f"--repeats {self.repeats!r} is invalid; give how many times to measure each served "
                            "operating point, 1 to 20")
        if self.seeds is not None and not (1 <= self.seeds <= 100 and (self.seeds == 1 or self.target_accuracy)):
            raise UserError(f"--seeds {self.seeds} is invalid; give 1 to 100 trainings per device, more than 1 "
                            "only with --target-accuracy")
        if self.onnx is not None:
            if ":" in self.model or self.target_accuracy is not None:
                raise UserError("--onnx serves a model trained elsewhere, so it takes neither --model nor "
                                "--target-accuracy; pass one of --onnx and --model")
            self.model = onnx_model_name(self.onnx)
        elif self.model not in MODELS and ":" not in self.model:  # ":": path/to/file.py:build (train/usermodel.py)
            raise UserError(f"--model {self.model!r} is invalid; choose one of {', '.join(MODELS)}")
        if self.device not in RUN_DEVICES:
            raise UserError(f"--device {self.device!r} is invalid; choose one of {', '.join(RUN_DEVICES)}")
        if not self.run:
            self.run = "run-" + _dt.datetime.now().strftime("%Y%m%d-%H%M%S")

    @property
    def budget(self) -> Budget:
        return QUICK if self.quick else FULL


@dataclass
class StageEvent:
    """What the CLI shows: a stage started ("start") or ended ("done"), with a short detail, or one
    line of a running stage's progress ("line", e.g. a sweep point)."""

    stage: str
    status: str  # "start" | "done" | "line"
    detail: str = ""
    seconds: float = 0.0


Progress = Callable[[StageEvent], None]


@dataclass
class Pipeline:
    """The stages of one run. `argv` turns a stage's CLI arguments into a command line."""

    cfg: RunConfig
    progress: Progress = lambda event: None
    argv: Callable[..., list[str]] = trainserve_argv
    children: Children = field(default_factory=Children)

    def __post_init__(self) -> None:
        self.root = run_dir(self.cfg.run, self.cfg.runs_dir, writable=True)
        self.done: dict[str, dict] = {}  # stages.json: the stages of this run that completed, by name
        if self.cfg.resume:
            self._check_resume()
        elif (self.root / "train" / "checkpoint.pt").exists() or (self.root / RUN_OPTIONS).exists():
            # train/checkpoint.pt: trainserve.core.card.CHECKPOINT_NAME (no torch import here)
            raise UserError(f"run {self.cfg.run!r} already exists at {self.root}; pass another --run (or none, for "
                            "a new dated one), --resume to finish it, or delete that folder to redo it")
        self.logs = self.root / "logs"
        self.env = _child_env()
        self.name = self.cfg.model  # the served model's name; run() checks a model of the user's own first
        self.cost_lines: list[str] = []  # the report's cost and plan lines, for the CLI (set by the report stage)

    # --- the job ------------------------------------------------------------------------------

    def run(self) -> Path:
        """Run every stage; return the report's path. Children are stopped on every way out."""
        gpu = self._gpu_devices()
        self.name = self._check_model()
        if not self.cfg.resume:
            write_json_atomic(self.root / RUN_OPTIONS, self._options())
        with interrupts_stop_children():
            try:
                if self.cfg.onnx is not None:  # trained elsewhere: its file becomes the repository
                    self._stage("export", self.argv("export", *self._run_args(), "--onnx", str(self.cfg.onnx)),
                                "ONNX trained elsewhere, model repository")
                else:
                    self._train(gpu)
                    if self.cfg.sweep:
                        for device in ["cpu"] + (["cuda"] if gpu else []):
                            self._sweep(device, gpu)
                    self._export()
                    for device in ["cpu"] + (["cuda"] if gpu else []):
                        self._frontier(device)
                for device in ["cpu"] + (["cuda"] if gpu else []):
                    self._limits(device)  # before the server, which would compete for the same cores
                    self._serve_and_load(device)
                return self._report()
            finally:
                self.children.stop_all()

    def _gpu_devices(self) -> bool:
        if self.cfg.device == "cpu":
            return False
        has = _cuda_available()
        if self.cfg.device == "cuda" and not has:
            raise UserError("--device cuda was given but no CUDA GPU is visible to PyTorch; use --device auto or cpu")
        return has

    def _train(self, gpu: bool) -> None:
        b, c = self.cfg.budget, self.cfg
        preset = c.preset or (b.preset_gpu if gpu else b.preset_cpu)
        samples = b.train_samples_gpu if gpu else b.train_samples
        common = ["--model", c.model, "--preset", preset, *cli_args(c.user_model), "--samples", str(samples),
                  "--dataset", c.dataset, "--batch-size", str(b.train_batch), "--warmup-steps", str(b.warmup_steps), *self._run_args()]
        # with a target accuracy, training runs until it is reached, within a larger epoch budget
        target = ["--target-accuracy", f"{c.target_accuracy:g}"] if c.target_accuracy is not None else []
        target += ["--seeds", str(c.seeds)] if target and c.seeds is not None else []
        epochs = str(b.accuracy_epochs if target else b.train_epochs)
        device = "cuda" if gpu else "cpu"
        precision = ["--precision", "bf16"] if gpu else []
        find_max_batch = ["--find-max-batch"] if gpu else []  # CUDA only: largest batch, training vs inference
        self._stage("train", self.argv("train", *common, "--device", device, *precision, *find_max_batch,
                                       "--epochs", epochs, *target),
                    f"{self._what(preset)} on the {'GPU' if gpu else 'CPU'}")
        if gpu:
            self._gpu_after_exit(self.root / "train" / "profile.json")
        if gpu and (not c.sweep or target):
            # the same model, batch and precision on both devices: the training speedup without a sweep, and
            # each device's time to the target accuracy; fp32, the CPU's own precision (bf16 autocast on a CPU
            # without bf16 units is many times slower)
            length = ["--epochs", epochs, *target] if target else ["--steps", str(b.compare_steps)]
            self._stage("compare", self.argv("compare", "--no-sweep", *common, *length),
                        "training on CPU and GPU, fp32" + (f", to accuracy {c.target_accuracy:g}" if target else ""))

    def _gpu_after_exit(self, path: Path) -> None:
        """NVML's used memory of the GPU once the training process has exited, into its record beside the
        readings it took itself (before training, and once it freed its memory): what exiting gives back."""
        if not path.is_file():
            return
        record = ProfileRecord.load(path)
        info = record.extra.setdefault("gpu_release", {})
        if isinstance(info, dict) and "nvml_used_after_exit_bytes" not in info:
            info["nvml_used_after_exit_bytes"] = gpu_memory_used_bytes(0)
            record.save(path)

    def _sweep(self, device: str, gpu: bool) -> None:
        """The training sweep on one device (train/sweep.py), one progress line per point as it ends."""
        b, c = self.cfg.budget, self.cfg
        preset = c.preset or (b.preset_gpu if gpu else b.preset_cpu)  # the trained model's size on both devices
        budget = c.sweep_budget_s if c.sweep_budget_s is not None else b.sweep_budget_s
        name = f"sweep-{device}"
        argv = self.argv("compare", "--sweep", "--device", device, "--sweep-budget-s", f"{budget:g}",
                         "--model", c.model, "--preset", preset, *cli_args(c.user_model), *self._run_args())
        # the budget bounds the points; start-up, the last point and writing get a margin on top
        self._stage(name, argv, f"{self._what(preset)} on the {_label(device)}, {budget:g} s budget",
                    timeout_s=budget * 1.5 + 60, lines=_sweep_point_line)

    def _export(self) -> None:
        self._stage("export", self.argv("export", *self._run_args(), "--eval-samples",
                                        str(self.cfg.budget.export_eval_samples)),
                    "ONNX, verification, model repository")

    def _frontier(self, device: str) -> None:
        """How large a transformer the device trains and serves (trainserve frontier), within its budget: on the
        GPU the card's memory is the capacity and the sizes climb to it; on the CPU a few small sizes."""
        b = self.cfg.budget
        sizes = [] if device == "cuda" else ["--sizes", b.frontier_sizes_cpu, "--seq-len", "32", "--no-check-edge"]
        quick = ["--train-precisions", "fp32", "--no-checkpointing"] if self.cfg.quick and device == "cpu" else []
        self._stage(f"frontier-{device}", self.argv("frontier", "--device", device, *sizes, *quick, "--budget-s",
                                                    f"{b.frontier_budget_s:g}", *self._run_args()),
                    f"model size against peak memory on the {_label(device)}, {b.frontier_budget_s:g} s budget",
                    timeout_s=b.frontier_budget_s * 2 + 60)

    def _limits(self, device: str) -> None:
        model = f"{self.name}_{'gpu' if device == 'cuda' else 'cpu'}"
        budget = self.cfg.budget.limits_budget_s
        batch = self._training_batch(device)  # inference's working set beside training's, at one batch
        extra = ["--working-set-batch", str(batch)] if batch else []
        self._stage(f"limits-{device}", self.argv("limits", "--device", device, "--model", model,
                                                  "--budget-s", f"{budget:g}", "--points",
                                                  self.cfg.budget.limits_points, *extra, *self._run_args()),
                    f"onnxruntime in process on the {_label(device)}, {budget:g} s")

    def _training_batch(self, device: str) -> int | None:
        """The batch of the training record the report sets beside inference on `device` (core.speedup.pick_train
        over the run's training records), or None before any training on it."""
        pairs = []
        for folder in ("train", "compare", "sweep"):
            for path in sorted((self.root / folder).rglob("*.json")):
                try:
                    r = ProfileRecord.load(path)
                except Exception:  # an index or a card, not a record
                    continue
                if r.phase == "train" and r.device == device:
                    pairs.append((f"{folder}/{path.relative_to(self.root / folder)}", r))
        picked = pick_train(pairs)
        return picked[1].batch_size if picked else None

    def _serve_and_load(self, device: str) -> None:
        name = f"serve-{device}"
        loads = [f"load-{device}-{s}" for s in SCENARIOS]
        model = f"{self.name}_{'gpu' if device == 'cuda' else 'cpu'}"
        if all(stage in self.done for stage in loads):
            self._kept(name, f"embedded server on the {_label(device)}")
            for scenario in SCENARIOS:
                self._kept(f"load-{device}-{scenario}", f"{scenario} on {model}")
            return
        t0 = time.monotonic()
        self.progress(StageEvent(name, "start", f"embedded server on the {_label(device)}"))
        server = self.children.start(
            name, self.argv("serve", "--model-repository", str(self.root / "model_repository"), "--device", device,
                            "--http-port", "0", "--grpc-port", "0", "--metrics-port", "0"),
            self.logs / f"{name}.log", env=self.env, capture_stdout=True)
        try:
            addresses = wait_ready(server, timeout_s=120)
        except ChildFailed as e:
            raise _failed(name, e.child.log_path, str(e)) from None
        self.progress(StageEvent(name, "done", f"ready at http://{addresses.get('http')}", time.monotonic() - t0))
        b = self.cfg.budget
        url = ["--url", addresses["http"], "--model", model, *self._run_args()]
        if addresses.get("metrics", "off") != "off":
            url += ["--metrics-url", f"http://{addresses['metrics']}/metrics"]
        ramp_s = b.ramp_step_s * (b.ramp_max_users + 1)  # an upper bound: the ramp stops at saturation
        # One Locust process tops out near a thousand batch-1 requests/s, below what a GPU server answers, and
        # the capacity plan reads its capacity off this ramp: on the GPU, clients in several processes (the
        # GPU server leaves the host's cores free). On the CPU they would take the server's own cores.
        processes = ramp_processes(device)
        windows = ["--warmup-s", f"{b.warmup_s:g}", "--window-s", f"{b.window_s:g}", "--repeats", str(self.cfg.repeats)]
        scenarios = {
            "ramp": ["--ramp", "--batch", "1", "--ramp-step-s", f"{b.ramp_step_s:g}", "--processes", str(processes),
                     "--ramp-max-users", str(max(b.ramp_max_users, 4 * processes)), "--duration", f"{ramp_s:.0f}s"],
            # MLPerf's Server scenario (the capacity the plan and cost use), SingleStream and Offline
            "server": None,  # its first rate comes from the ramp, measured just before
            "batch1": ["--users", "1", "--batch", "1", "--duration", f"{b.measure_s:g}s", *windows],
            "saturated": ["--users", str(b.saturate_users), "--batch", str(b.saturate_batch),
                          "--duration", f"{b.measure_s:g}s", *windows],
            "server-nobatch": None,  # its first rate comes from the Server search on the model as exported
            "shared-rate": None,  # its rate comes from the batching-off search, just before
            "shared-rate-nobatch": None,
        }
        assert tuple(scenarios) == SCENARIOS
        for scenario, args in scenarios.items():
            target = f"embedded-{device}-{scenario}"  # the record's file name: load/<target>.json
            if f"load-{device}-{scenario}" in self.done:
                self._kept(f"load-{device}-{scenario}", f"{scenario} on {model}")
                continue
            served = model + NOBATCH_SUFFIX if scenario.endswith("nobatch") else model
            shared = self._shared_rate(device) if scenario.startswith("shared-rate") else None
            if isinstance(shared, str):
                self._skipped(f"load-{device}-{scenario}", f"{scenario} on {served}", shared)
                continue
            if shared is not None:
                args = self._shared_rate_args(device, shared, windows)
            elif args is None:
                args = self._server_args(device, windows, nobatch=scenario == "server-nobatch")
            t1 = time.monotonic()
            # the load stage samples the server's own process too, so it writes its record once, bound and all
            self._stage(f"load-{device}-{scenario}",
                        self.argv("load", *_with_model(url, served), *args, "--target", target,
                                  "--server-pid", str(server.proc.pid)),
                        f"{scenario} on {served}", mark=False)
            self._mark(f"load-{device}-{scenario}", time.monotonic() - t1)
        self.children.stop_all()  # the server, before the next one competes for the same cores

    def _server_args(self, device: str, windows: list[str], nobatch: bool = False) -> list[str]:
        """The capacity search, starting at 80% of the closed-loop ramp's best within the SLO (the open loop
        rarely sustains more; 100 req/s when the ramp found none), or on a GPU in the full run from the search's own
        closed-loop estimate (Budget.search_budget_gpu_s). With batching off it starts at half the capacity
        found with batching on: each request is then its own execution, and a first rate above capacity spends
        the whole budget failing."""
        b = self.cfg.budget
        slo = (self.cfg.cost.slo_p99_ms if self.cfg.cost is not None else None) or DEFAULT_SLO_P99_MS
        start = 100.0
        try:
            if nobatch:
                search = LoadParts.of(ProfileRecord.load(self.root / "load" / f"embedded-{device}-server.json")).search
                best = search.capacity_req_s if search is not None else None
            else:
                ramp = LoadParts.of(ProfileRecord.load(self.root / "load" / f"embedded-{device}-ramp.json"))
                best = ramp.saturation.requests_s if ramp.saturation is not None else None
            start = max(1.0, (0.5 if nobatch else 0.8) * best) if best else start
        except UserError:
            pass
        # on a GPU server `trainserve load` picks enough Locust processes for the rates the search may try
        # (master and workers, loadtest/search_workers.py); a CPU server keeps the cores: one process
        processes = [] if device == "cuda" else ["--processes", "1"]
        first, budget = ["--rate", f"{start:.1f}"], b.search_budget_s
        if device == "cuda" and not nobatch and b.search_budget_gpu_s is not None:
            first, budget = [], b.search_budget_gpu_s  # no --rate: trainserve load's closed-loop probe sets it
        return ["--search", "--batch", "1", *first, "--slo-p99-ms", f"{slo:g}",
                "--duration", f"{budget:g}s", "--search-probe-s", f"{b.search_probe_s:g}", *processes,
                *windows]

    def _shared_rate(self, device: str) -> float | str:
        """The one open-loop rate both variants are offered, or why there is none: SHARED_RATE_SHARE of the lower
        Server capacity (on a GPU batching off's; on a few CPU cores batching can carry less), which both carry
        within the SLO."""
        capacities = []
        for name, label in (("server", "as exported"), ("server-nobatch", "with batching off")):
            try:
                found = ProfileRecord.load(self.root / "load" / f"embedded-{device}-{name}.json")
            except UserError:
                return f"the Server search {label} wrote no record"
            search = LoadParts.of(found).search
            capacity = search.capacity_req_s if search is not None else None
            if not capacity:
                return f"the Server search {label} found no rate within the SLO, so there is no rate both carry"
            capacities.append(capacity)
        return round(max(1.0, SHARED_RATE_SHARE * min(capacities)), 1)

    def _shared_rate_args(self, device: str, rate: float, windows: list[str]) -> list[str]:
        """Open loop (Poisson arrivals, latency from the scheduled send) at `rate`, one row per request."""
        processes = [] if device == "cuda" else ["--processes", "1"]  # as the Server search: a CPU server keeps the cores
        # the record says itself that it is one side of the pair, so nothing rewrites it after the load stage
        return ["--rate", f"{rate:g}", "--batch", "1", "--duration", f"{self.cfg.budget.shared_rate_s:g}s",
                *processes, *windows,
                "--shared-rate-basis", f"{SHARED_RATE_SHARE:g} x the lower of the two Server capacities"]

    def _skipped(self, stage: str, detail: str, why: str) -> None:
        self.progress(StageEvent(stage, "start", detail))
        self.progress(StageEvent(stage, "done", f"skipped: {why}", 0.0))
        self._mark(stage, 0.0)  # a resumed run would skip it for the same reason: its inputs are kept

    def _report(self) -> Path:
        t0 = time.monotonic()
        self.progress(StageEvent("report", "start", "HTML, Markdown, summary.json"))

        html, self.cost_lines = write_report(self.root, self.cfg.cost)
        self.progress(StageEvent("report", "done", str(html), time.monotonic() - t0))
        return html

    # --- helpers ------------------------------------------------------------------------------

    def _what(self, preset: str) -> str:
        """The trained model in a stage's line: "cnn/tiny", or the name of a model of the user's own."""
        return f"{self.cfg.model}/{preset}" if self.cfg.model in MODELS else self.name

    def _check_model(self) -> str:
        """The served model's name; a model of the user's own is first built, run on one batch and
        exported in this process, so a model that cannot work fails in one sentence before any stage."""
        c = self.cfg
        if c.onnx is not None:  # read from the graph and run on two samples: a file that cannot be served ends here
            return card_from_onnx(c.onnx).name
        if ":" not in c.model:
            return c.model
        from trainserve.train.config import TrainConfig
        from trainserve.train.usercheck import check_user_model  # imports torch: only for a model of your own

        self.progress(StageEvent("check", "start", f"{c.model}: one batch and an ONNX export"))
        t0 = time.monotonic()
        train_cfg = TrainConfig(model=c.model, dataset=c.dataset, **c.user_model)
        config = check_user_model(train_cfg, export=True)
        self.progress(StageEvent("check", "done", f"{config.name}: input {list(config.input_shape)} "
                                 f"{config.input_dtype}, {config.num_classes} classes", time.monotonic() - t0))
        return config.name

    def _run_args(self) -> list[str]:
        args = ["--run", self.cfg.run]
        if self.cfg.runs_dir is not None:
            args += ["--runs-dir", str(self.cfg.runs_dir)]
        return args

    def _stage(self, name: str, argv: list[str], detail: str, timeout_s: float | None = None,
               lines: Callable[[str], str | None] | None = None, mark: bool = True) -> None:
        """Run one stage's CLI; `lines` picks log lines to show as "line" events while it runs."""
        if name in self.done:
            self._kept(name, detail)
            return
        t0 = time.monotonic()
        self.progress(StageEvent(name, "start", detail))
        log_path = self.logs / f"{name}.log"
        timeout_s = timeout_s or self.cfg.budget.stage_timeout_s
        child = self.children.start(name, argv, log_path, env=self.env)
        if lines is None:
            rc = self.children.wait(child, timeout_s=timeout_s)
        else:
            rc = self._wait_showing(name, child, log_path, timeout_s, lines)
        if rc != 0:
            why = (f"ran past its {timeout_s:.0f} s limit" if rc == 124
                   else f"exited with code {rc}")
            raise _failed(name, log_path, why)
        if mark:  # a load stage is marked by its caller, once the server's own figures are added to its record
            self._mark(name, time.monotonic() - t0)
        self.progress(StageEvent(name, "done", detail, time.monotonic() - t0))

    # --- resuming ---------------------------------------------------------------------------

    def _options(self) -> dict[str, Any]:
        """What decides a run's work, as written to run.json: a resumed run must be given the same."""
        c = self.cfg
        slo = (c.cost.slo_p99_ms if c.cost is not None else None) or DEFAULT_SLO_P99_MS
        return {"model": c.model, "preset": c.preset, "device": c.device, "quick": c.quick, "sweep": c.sweep,
                "sweep_budget_s": c.sweep_budget_s, "dataset": c.dataset, "target_accuracy": c.target_accuracy,
                "seeds": c.seeds, "user_model": c.user_model, "onnx": str(c.onnx) if c.onnx is not None else None,
                "repeats": c.repeats, "slo_p99_ms": slo}

    def _check_resume(self) -> None:
        """--resume: the run must exist with its options, and be given the same ones."""
        path = self.root / RUN_OPTIONS
        try:
            earlier = json.loads(path.read_text())
            done = json.loads((self.root / STAGES).read_text()) if (self.root / STAGES).exists() else {}
        except (OSError, ValueError) as e:
            raise UserError(f"--resume: run {self.cfg.run!r} cannot be resumed, its {path.name} at {self.root} is "
                            f"missing or unreadable ({type(e).__name__}); start it again without --resume") from None
        now = json.loads(json.dumps(self._options(), default=str))
        for key, value in now.items():
            if earlier.get(key) != value:
                flag = "--" + key.replace("_", "-")
                raise UserError(f"--resume: run {self.cfg.run!r} was started with {flag} {earlier.get(key)!r}, not "
                                f"{value!r}; resume it with the options it was started with, or start a new --run")
        self.done = done if isinstance(done, dict) else {}

    def _mark(self, stage: str, seconds: float) -> None:
        """Record a completed stage (stages.json), so that --resume keeps it."""
        self.done[stage] = {"seconds": round(seconds, 1), "ended": _dt.datetime.now().isoformat(timespec="seconds")}
        write_json_atomic(self.root / STAGES, self.done)

    def _kept(self, stage: str, detail: str) -> None:
        self.progress(StageEvent(stage, "start", detail))
        self.progress(StageEvent(stage, "done", "kept from the earlier attempt (--resume)", 0.0))


    def _wait_showing(self, name: str, child, log_path: Path, timeout_s: float,
                      lines: Callable[[str], str | None]) -> int:
        """Wait like Children.wait, passing the log's new lines through `lines` every half second."""
        deadline = time.monotonic() + timeout_s
        offset = 0

        def show() -> None:
            nonlocal offset
            try:
                with open(log_path, "rb") as f:
                    f.seek(offset)
                    chunk = f.read()
            except OSError:
                return
            end = chunk.rfind(b"\n") + 1  # whole lines only; the rest waits for the next look
            offset += end
            for raw in chunk[:end].decode(errors="replace").splitlines():
                shown = lines(raw)
                if shown:
                    self.progress(StageEvent(name, "line", shown))

        while child.proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.5)
            show()
        rc = self.children.wait(child, timeout_s=max(0.0, deadline - time.monotonic()))
        show()
        return rc


def _sweep_point_line(line: str) -> str | None:
    """The sweep's own one line per point (trainserve.commands._sweep_view.point_line), without its prefix."""
    prefix = "sweep point:"
    i = line.find(prefix)
    return line[i + len(prefix):].strip() if i >= 0 else None


def _with_model(url: list[str], model: str) -> list[str]:
    """The load arguments with `--model` set to `model`."""
    i = url.index("--model")
    return [*url[:i + 1], model, *url[i + 2:]]


def ramp_processes(device: str) -> int:
    """Locust processes for the batch-1 ramp: 1 against a CPU server (it needs the cores); against a GPU
    server as many as the host spares (loadtest/clientcpu.process_cap), as the plan reads capacity off it."""
    return process_cap("cuda") if device == "cuda" else 1


def _failed(stage: str, log_path: Path, why: str) -> UserError:
    last = _last_line(log_path)
    tail = f" (last line: {last!r})" if last else ""
    return UserError(f"the {stage} stage failed: {why}{tail}; see its log at {log_path}")


def _last_line(path: Path) -> str:
    try:
        lines = [ln.strip() for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    return lines[-1][:200] if lines else ""


def _label(device: str) -> str:
    return "GPU" if device == "cuda" else "CPU"


def _cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


def _child_env() -> dict[str, str]:
    """The children import this same trainserve tree and write their logs line by line."""
    env = child_env(PYTHONUNBUFFERED="1", COLUMNS="160")  # COLUMNS: logs written by rich stay readable
    env.setdefault("TERM", "dumb")
    return env
