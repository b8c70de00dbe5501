"""A loaded model version: one onnxruntime InferenceSession per instance, and its metadata.

Knows nothing of HTTP or gRPC: it takes numpy arrays and returns numpy arrays.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from trainserve.core import envs
from trainserve.core.errors import UserError
from trainserve.core.options.serve import SERVE_DEVICES
from trainserve.core.procs import usable_cpus
from trainserve.serve.model import tuning
from trainserve.serve.model.buckets import bucket_for, pad_rows, parse_buckets
from trainserve.serve.datatypes import config_to_kserve, numpy_dtype
from trainserve.serve.request_errors import ServeError
from trainserve.serve.model.tuning import ThreadChoice

log = logging.getLogger(__name__)

DEVICES = SERVE_DEVICES  # the option tree's choices of --device


class LoadError(ServeError):
    """A model version that could not be loaded; it is reported not ready with this message."""


class CudaUnavailable(LoadError):
    """--device cuda, but onnxruntime fell back to the CPU: the server refuses to start."""


@dataclass(frozen=True)
class TensorSpec:
    """One input or output as the protocol shows it: KServe datatype, shape with -1 for any size (batch first)."""

    name: str
    datatype: str  # KServe name: FP32, INT64, BYTES, ...
    shape: tuple[int, ...]  # full shape including the batch dim (-1) when max_batch_size > 0

    @property
    def dtype(self) -> np.dtype:
        return numpy_dtype(self.datatype)


@dataclass(frozen=True)
class SessionOptions:
    """How sessions are built: execution provider and pinned thread counts."""

    device: str = "cpu"  # "cpu" -> CPUExecutionProvider, "cuda" -> CUDAExecutionProvider (no silent CPU fallback)
    intra_op_threads: int = 0  # onnxruntime intra-op threads per session; 0 = the cores divided by the instance count
    inter_op_threads: int = 1  # inter-op pool size per session (only used in parallel execution mode)
    # onnxruntime's pool threads busy-wait after each run by default; on a server whose Python event loop
    # shares the cores, that spinning steals the loop's CPU (measured here: ~2x the server CPU per request).
    allow_spinning: bool = False

    def __post_init__(self) -> None:
        if self.device not in DEVICES:
            raise UserError(f"device={self.device!r} must be one of {DEVICES}")
        if self.intra_op_threads < 0:
            raise UserError(f"intra_op_threads={self.intra_op_threads} must be >= 0")
        if self.inter_op_threads < 0:
            raise UserError(f"inter_op_threads={self.inter_op_threads} must be >= 0")



def config_param(config, key: str) -> str | None:
    """A string parameter of config.pbtxt (`parameters { key: ... value { string_value: ... } }`)."""
    return config.parameters[key].string_value if key in config.parameters else None


def _flag(config, key: str, model: str) -> bool | None:
    """A true/false parameter of config.pbtxt; None when absent."""
    value = config_param(config, key)
    if value is None:
        return None
    if value.lower() not in ("true", "1", "yes", "false", "0", "no"):
        raise LoadError(f"model '{model}': parameter {key} is {value!r}; use true or false")
    return value.lower() in ("true", "1", "yes")


# Triton onnxruntime backend's `cudnn_conv_algo_search` parameter values -> the CUDA provider's option
CUDNN_SEARCH = {"0": "EXHAUSTIVE", "1": "HEURISTIC", "2": "DEFAULT"}
KIND_GPU = 1  # ModelInstanceGroup.Kind.KIND_GPU in Triton's model_config.proto
SMALL_BATCH_ROWS = 1  # batches this small run on a single-threaded session when they cannot be timed (CPU)
SMALL_SESSION_MAX_BYTES = 256 * 2**20  # ... for model files up to this size
# `batch_buckets` / `bucket_sessions` when config.pbtxt does not say: on the GPU, power-of-two batches with a
# session each, since onnxruntime's CUDA provider pays ~40 ms at every change of shape (see serve.model.buckets)
DEFAULT_BUCKETS = {"cpu": "none", "cuda": "pow2"}
ORT_SPIN_ENV = envs.SERVE_ORT_SPIN.name  # "run": CPU sessions spin inside runs (spin_in_run); for measurements
BUCKET_SESSIONS_MAX_BYTES = 4 * 2**30  # ... but by default only while the buckets' copies of the weights fit in this


def default_bucket_sessions(device: str, model_bytes: int, buckets: int) -> bool:
    """A session per bucket unless asked: on CUDA, while the weights held once per bucket stay within
    BUCKET_SESSIONS_MAX_BYTES per instance (a 4M-parameter CNN with 10 buckets holds 160 MB)."""
    return device == "cuda" and model_bytes * buckets <= BUCKET_SESSIONS_MAX_BYTES


@dataclass(frozen=True)
class SessionRecipe:
    """Everything an onnxruntime session of one model version is built from."""

    path: Path
    device: str  # "cpu" | "cuda"
    intra: int  # intra-op threads
    inter: int  # inter-op threads
    device_id: int = 0  # the CUDA device (config.pbtxt's instance_group gpus)
    spin: bool = False  # onnxruntime's thread-pool spinning
    cudnn_search: str = "HEURISTIC"

    def build(self, intra: int | None = None, spin: bool | None = None, in_run: bool | None = None) -> Any:
        """A new session; `intra` / `spin` override the recipe's (the single-threaded twin), `in_run` whether its
        pool spins inside runs only (the lone-run twin; None: as TRAINSERVE_SERVE_ORT_SPIN says)."""
        return _make_session(self.path, self.device, self.intra if intra is None else intra, self.inter, self.device_id,
                             self.spin if spin is None else spin, self.cudnn_search, in_run)


def _device_note(config, device: str) -> str:
    """config.pbtxt's instance kind is a request; where the server runs decides (Triton would refuse a
    KIND_GPU model without a GPU): say so rather than serve it on the CPU silently."""
    if device == "cpu" and any(g.kind == KIND_GPU for g in config.instance_group):
        return "config.pbtxt asks for KIND_GPU instances, but this server runs with --device cpu: the model runs on the CPU"
    return ""


class LoadedModel:
    """One version of a model, ready to run: `run(instance, feed, outputs)` on the session of that instance.

    `inputs` / `outputs` are the protocol view (TensorSpec, batch dim -1 included when batching);
    `config` is the ModelConfig protobuf; `threads` and `providers` say how it runs.
    """

    def __init__(self, name: str, version: str, model_dir: Path, config, options: SessionOptions) -> None:
        self.name = name
        self.version = version
        self.config = config
        self.device = options.device
        self.max_batch_size: int = config.max_batch_size
        self._describe_io(config)
        count = sum(g.count or 1 for g in config.instance_group) or 1
        self.recipe = self._recipe(model_dir, config, options, count)
        # the three kinds of sessions, in the order they are built:
        # 1. one per instance (the instance's own, on `intra` threads)
        self.sessions = [self.recipe.build() for _ in range(count)]
        self._check_graph_inputs()
        # 2. (CPU) a single-threaded twin per instance for the smallest batches, when timing says so
        self.small_sessions: list[Any] = []
        self.thread_choice = self._choose_threads(count)
        # 2b. (CPU) a twin whose pool spins inside runs, for a lone batch-1 request on the loop, when timing says so
        self.lone_session: Any = None
        self.lone_timings_ms: dict[str, float] = {}
        self._choose_lone()
        # 3. one per batch bucket per instance, so each session only ever sees one shape
        self.buckets = self._buckets(config, options.device)
        self.bucket_sessions = self._make_bucket_sessions()
        self.warmup_s = self._warm_up()
        self.providers = self.sessions[0].get_providers()
        self.device_note = _device_note(config, options.device)
        if self.device_note:
            log.warning("model '%s' version %s: %s", name, version, self.device_note)
        intra, inter = self.recipe.intra, self.recipe.inter
        self.threads = {"intra_op": intra, "inter_op": inter, "small_batch_rows": self.small_batch_rows,
                        "lone_spinning": self.lone_session is not None}
        log.info(
            "loaded %s version %s: %d instance(s) on %s, intra_op_threads=%d inter_op_threads=%d, max_batch_size=%d, "
            "batch buckets %s%s (warm-up %.2f s); threads: %s%s",
            name, version, count, self.providers[0], intra, inter, self.max_batch_size, self.buckets or "off",
            " with a session each" if self.bucket_sessions else "", self.warmup_s, self.thread_choice.describe(),
            "; lone batch-1 runs: " + ("spinning inside runs" if self.lone_session is not None else "on the pool")
            + (" (b1: " + " vs ".join(f"{k} {v:.3g} ms" for k, v in self.lone_timings_ms.items()) + ")"
               if self.lone_timings_ms else "") if self.lone_session is not None or self.lone_timings_ms else "",
        )

    def _describe_io(self, config) -> None:
        """The protocol view of the inputs and outputs (batch dim -1 first when the model batches)."""
        prefix = (-1,) if config.max_batch_size > 0 else ()
        self.inputs = [TensorSpec(i.name, config_to_kserve(_dt_name(i.data_type)), prefix + tuple(i.dims)) for i in config.input]
        self.outputs = [TensorSpec(o.name, config_to_kserve(_dt_name(o.data_type)), prefix + tuple(o.dims)) for o in config.output]
        self.input_by_name = {t.name: t for t in self.inputs}
        self.output_by_name = {t.name: t for t in self.outputs}
        self.output_names = [t.name for t in self.outputs]
        self.string_inputs = {t.name for t in self.inputs if t.datatype == "BYTES"}
        self.string_outputs = {t.name for t in self.outputs if t.datatype == "BYTES"}

    def _recipe(self, model_dir: Path, config, options: SessionOptions, count: int) -> SessionRecipe:
        """How this version's sessions are built, from config.pbtxt's parameters and the server's options."""
        path = model_dir / self.version / (config.default_model_filename or "model.onnx")
        if not path.exists():
            raise LoadError(f"unable to find '{path}' for model '{self.name}'")
        try:
            intra = int(config_param(config, "intra_op_thread_count") or options.intra_op_threads)
            inter = int(config_param(config, "inter_op_thread_count") or options.inter_op_threads)
        except ValueError:
            raise LoadError(f"model '{self.name}': intra/inter_op_thread_count parameters must be integers") from None
        if intra == 0:
            # pin a number rather than leave onnxruntime's default, so it can be reported: the cores shared by instances
            intra = max(1, usable_cpus() // count)
        gpus = [g for grp in config.instance_group for g in grp.gpus]
        search = config_param(config, "cudnn_conv_algo_search") or "1"
        if search not in CUDNN_SEARCH:
            raise LoadError(f"model '{self.name}': parameter cudnn_conv_algo_search is {search!r}; use 0 (exhaustive), "
                            "1 (heuristic) or 2 (default algorithm), as in Triton's onnxruntime backend")
        return SessionRecipe(path, options.device, intra, inter, gpus[0] if gpus else 0, options.allow_spinning,
                             CUDNN_SEARCH[search])

    def _check_graph_inputs(self) -> None:
        sess_inputs = {i.name for i in self.sessions[0].get_inputs()}
        missing = [t.name for t in self.inputs if t.name not in sess_inputs]
        if missing:
            raise LoadError(f"model '{self.name}': config input(s) {missing} are not inputs of the ONNX graph {sorted(sess_inputs)}")

    def _make_bucket_sessions(self) -> list[dict[int, Any]]:
        """`bucket_sessions`: one session per bucket per instance (onnxruntime's CUDA cost is per shape
        *change*, not per new shape); weights are held once per bucket. [] when off."""
        per_bucket = _flag(self.config, "bucket_sessions", self.name)
        if per_bucket is None:
            per_bucket = default_bucket_sessions(self.device, self.recipe.path.stat().st_size, len(self.buckets))
        if not (self.buckets and per_bucket):
            return []
        # the instance's own session takes the largest bucket (and any larger batch): one session fewer
        return [{b: self.recipe.build() for b in self.buckets[:-1]} | {self.buckets[-1]: own} for own in self.sessions]

    def _choose_threads(self, count: int) -> ThreadChoice:
        """Which batches run on a single-threaded twin session (CPU only): config.pbtxt's `small_batch_rows`
        when given, else measured on this model's shapes (serve.model.tuning). Builds self.small_sessions: with
        spinning off, waking a sleeping intra-op pool can cost more than it saves. Weights are held twice,
        so only for models up to SMALL_SESSION_MAX_BYTES."""
        r = self.recipe
        intra = r.intra
        given = config_param(self.config, "small_batch_rows")
        if given is not None:
            try:
                rows = int(given)
                if rows < 0:
                    raise ValueError
            except ValueError:
                raise LoadError(f"model '{self.name}': parameter small_batch_rows is {given!r}; use a whole number "
                                ">= 0 (0: every batch on the instance's intra-op threads)") from None
        if r.device != "cpu" or intra <= 1 or r.path.stat().st_size > SMALL_SESSION_MAX_BYTES or given == "0":
            return ThreadChoice(intra, 0, "config" if given is not None else "fixed")
        self.small_sessions = [r.build(intra=1, spin=False) for _ in range(count)]
        if given is not None:
            return ThreadChoice(intra, rows, "config")
        try:
            choice = tuning.choose(self.sessions[0], self.small_sessions[0], self.inputs, self.output_names,
                                   intra, self.max_batch_size)
        except ValueError as e:  # text, or a variable non-batch dimension: no shape to time
            log.info("model '%s': %s; batches of %d row(s) run on 1 thread", self.name, e, SMALL_BATCH_ROWS)
            return ThreadChoice(intra, SMALL_BATCH_ROWS, "fixed")
        except Exception as e:  # onnxruntime failed: requests will fail the same way; keep the plain rule meanwhile
            log.warning("model '%s': thread choice by timing failed (%s); batches of %d row(s) run on 1 thread",
                        self.name, e, SMALL_BATCH_ROWS)
            return ThreadChoice(intra, SMALL_BATCH_ROWS, "fixed")
        if not choice.small_batch_rows:
            self.small_sessions = []  # never faster here: not worth a second copy of the weights
        return choice

    def _choose_lone(self) -> None:
        """Whether a lone batch-1 request (one run on the loop with every instance idle: Batcher._run_direct)
        runs on a twin session whose intra-op threads spin inside the run and sleep once it returns
        (onnxruntime's session.force_spinning_stop). A sleeping pool woken for each piece of a run is what
        keeps a served lone request above the in-process best: on a 10-thread server CPU, batch 1
        back to back took 2.29 ms with the pool asleep and 1.61 ms spinning inside runs. Spinning for every
        run costs the batches under load (16 gRPC users: mean batch 8.0 -> 4.1, docs/BENCHMARKS.md); a lone
        run has the cores to itself. Only for CPU models of several threads whose pool does not spin already,
        whose batch 1 runs on that pool (no single-threaded twin for it), up to SMALL_SESSION_MAX_BYTES (the
        weights are held once more), and only when it measured faster here by more than 5%; config.pbtxt's
        `lone_spinning` "0" or "1" skips the timing."""
        r = self.recipe
        given = _flag(self.config, "lone_spinning", self.name)
        if (r.device != "cpu" or r.intra <= 1 or r.spin or spin_in_run(r.device, r.intra) or given is False
                or self.small_batch_rows >= 1 or self.max_batch_size <= 0 or self.string_inputs
                or r.path.stat().st_size > SMALL_SESSION_MAX_BYTES):
            return
        twin = r.build(in_run=True)
        if given is None:
            try:
                feed = tuning.random_feed(self.inputs, 1, np.random.default_rng(0))
                pool_ms = tuning.median_run_ms(self.sessions[0], feed, self.output_names)
                twin_ms = tuning.median_run_ms(twin, feed, self.output_names)
            except Exception as e:  # no shape to time, or onnxruntime failed: keep the pool
                log.info("model '%s': lone-run spinning not timed (%s); lone runs on the pool", self.name, e)
                return
            self.lone_timings_ms = {"pool": round(pool_ms, 4), "spinning inside runs": round(twin_ms, 4)}
            if twin_ms >= pool_ms * 0.95:
                return
        self.lone_session = twin

    def served_config(self):
        """The config as served (GET .../config), like Triton's auto-completed one: the thread layout that
        runs filled in (intra_op_thread_count, small_batch_rows), `thread_choice` saying why, and
        `device_note` when the config's instance kind is not where the model runs."""
        config = type(self.config)()
        config.CopyFrom(self.config)
        if self.device == "cpu":
            for key, value in (("intra_op_thread_count", self.threads["intra_op"]),
                               ("inter_op_thread_count", self.threads["inter_op"]),
                               ("small_batch_rows", self.small_batch_rows)):
                config.parameters[key].string_value = str(value)
            config.parameters["thread_choice"].string_value = self.thread_choice.describe()
            r = self.recipe
            config.parameters["intra_op_spinning"].string_value = (
                "always" if r.spin else "inside runs" if spin_in_run(r.device, r.intra)
                else "inside lone batch-1 runs" if self.lone_session is not None else "off")
            if self.lone_timings_ms:
                config.parameters["lone_spinning_timings"].string_value = ", ".join(
                    f"{k} {v:.3g} ms" for k, v in self.lone_timings_ms.items())
        if self.device_note:
            config.parameters["device_note"].string_value = self.device_note
        return config

    @property
    def small_batch_rows(self) -> int:
        """Runs of up to this many rows go to the single-threaded session (0: none)."""
        return self.thread_choice.small_batch_rows if self.small_sessions else 0

    def _buckets(self, config, device: str) -> list[int]:
        """Batch sizes runs are padded to (serve.model.buckets); [] = no padding. Models with BYTES tensors never pad."""
        given = config_param(config, "batch_buckets")
        if given is None and (self.max_batch_size <= 0 or self.string_inputs or self.string_outputs):
            return []
        try:
            buckets = parse_buckets(DEFAULT_BUCKETS[device] if given is None else given, self.max_batch_size)
        except ValueError as e:
            raise LoadError(f"model '{self.name}': {e}") from None
        if buckets and (self.string_inputs or self.string_outputs):
            raise LoadError(f"model '{self.name}': batch_buckets cannot pad BYTES tensors; set it to 'none'")
        return buckets

    def _warm_up(self) -> float:
        """Run every bucket once on every session with zero inputs, so no request pays a shape's first run.
        Skipped when an input has a variable non-batch dimension (the shape to warm is unknown)."""
        if not self.buckets or any(d < 0 for t in self.inputs for d in t.shape[1:]):
            return 0.0
        t0 = time.perf_counter()
        try:
            for instance in range(self.instance_count):
                for b in self.buckets:
                    feed = {t.name: np.zeros((b, *t.shape[1:]), dtype=t.dtype) for t in self.inputs}
                    self._session(instance, b, b).run(self.output_names, feed)
        except Exception as e:  # a model that cannot run zeros at a bucket size would fail on requests too
            raise LoadError(f"model '{self.name}': warm-up run failed at a batch of {b}: {e}") from None
        return time.perf_counter() - t0

    def _session(self, instance: int, rows: int | None, size: int | None):
        """The session that runs `rows` rows padded to `size`."""
        if self.bucket_sessions and size in self.bucket_sessions[instance]:
            return self.bucket_sessions[instance][size]
        if self.small_sessions and rows is not None and rows <= self.thread_choice.small_batch_rows:
            return self.small_sessions[instance]
        return self.sessions[instance]

    @property
    def instance_count(self) -> int:
        return len(self.sessions)

    def bucket(self, rows: int | None) -> int | None:
        """The batch size a run of `rows` rows is padded to (rows itself without buckets)."""
        return bucket_for(self.buckets, rows) if self.buckets and rows is not None else rows

    def run(self, instance: int, feed: dict[str, np.ndarray], outputs: list[str], rows: int | None = None,
            lone: bool = False) -> list[np.ndarray]:
        """session.run on one instance's session (its single-threaded twin for `rows` <= small_batch_rows; the
        lone-run twin for a `lone` run of one row, when there is one), the batch padded to its bucket when the
        model has buckets (a feed already that long, as the batcher joins it, is not copied); BYTES tensors
        are converted bytes <-> str."""
        if self.string_inputs:
            feed = {k: (_to_str(v) if k in self.string_inputs else v) for k, v in feed.items()}
        size = self.bucket(rows)
        if size != rows:
            feed = {k: pad_rows(v, size) for k, v in feed.items()}  # pad_rows returns a full-length array itself
        session = self._session(instance, rows, size)
        if lone and rows == 1 and self.lone_session is not None and session is self.sessions[instance]:
            session = self.lone_session
        result = session.run(outputs, feed)
        if size != rows:
            result = [r[:rows] for r in result]  # the padding's rows are dropped here, never returned
        if self.string_outputs:
            result = [_to_bytes(r) if n in self.string_outputs else r for n, r in zip(outputs, result)]
        return result


def _dt_name(value: int) -> str:
    from tritonclient.grpc import model_config_pb2

    return model_config_pb2.DataType.Name(value)


def _to_str(a: np.ndarray) -> np.ndarray:
    return np.vectorize(lambda b: b.decode() if isinstance(b, bytes) else str(b), otypes=[object])(a)


def _to_bytes(a: np.ndarray) -> np.ndarray:
    return np.vectorize(lambda s: s.encode() if isinstance(s, str) else bytes(s), otypes=[object])(a)


_preloaded = False


def _preload_cuda_libraries(ort) -> None:
    """Load the CUDA/cuDNN libraries that pip's nvidia-* packages (e.g. torch's) ship, once.

    Without this, onnxruntime-gpu finds them only through LD_LIBRARY_PATH, and otherwise falls back
    to the CPU (which the caller then refuses).
    """
    global _preloaded
    if _preloaded or not hasattr(ort, "preload_dlls"):
        return
    _preloaded = True
    try:
        ort.preload_dlls()
    except Exception as e:  # a missing library shows up as the CPU fallback the caller reports
        log.debug("onnxruntime.preload_dlls() failed: %s", e)


def spin_in_run(device: str, intra: int, setting: str | None = None) -> bool:
    """Whether a session without --spin spins its intra-op threads inside a run only (onnxruntime's
    allow_spinning with session.force_spinning_stop: the pool busy-waits for the run's pieces of work and
    sleeps once the run returns): only when asked, ORT_SPIN_ENV=run, and only CPU sessions of several threads.

    Why not by default: it helps a lone request (on a 16-core CPU, server on 10 cores and clients on
    the rest, served batch-1 HTTP 1.14x req/s, p50 2.86 -> 2.50 ms) but costs a third more server CPU per
    request (12.96 -> 17.24 ms) and, at 16 users, 3-5% of throughput and p99 30 -> 42 ms; and in the one
    example run made with it (server and clients on the same 16 cores) the CPU's Server capacity was
    128 ± 174 req/s against 518 ± 110 in an example without it, its batch-1 point unstable. On a
    2-core VM it was better at a fixed 100 req/s (p99 46-93 vs 166-204 ms over 3 repeats; docs/BENCHMARKS.md).
    Spinning after runs too (--spin) also takes the cores the event loop needs between requests.
    Raises ValueError for a value other than "", "off" and "run"."""
    setting = (envs.SERVE_ORT_SPIN.get() if setting is None else setting).strip().lower()
    if setting not in ("", "off", "run"):
        raise ValueError(f"{ORT_SPIN_ENV}={setting!r} must be 'run' (CPU sessions spin inside runs) or 'off' "
                         "(the default)")
    return setting == "run" and device == "cpu" and intra > 1


def _make_session(path: Path, device: str, intra: int, inter: int, device_id: int = 0, spin: bool = False,
                  cudnn_search: str = "HEURISTIC", in_run: bool | None = None):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = intra
    so.inter_op_num_threads = inter
    in_run = not spin and (spin_in_run(device, intra) if in_run is None else in_run)
    so.add_session_config_entry("session.intra_op.allow_spinning", "1" if spin or in_run else "0")
    so.add_session_config_entry("session.inter_op.allow_spinning", "1" if spin else "0")
    if in_run:
        so.add_session_config_entry("session.force_spinning_stop", "1")
    so.log_severity_level = 3  # errors only: onnxruntime's warnings would flood the server log
    providers: list = ["CPUExecutionProvider"]
    if device == "cuda":
        # Dynamic batching runs many batch sizes. With onnxruntime's default exhaustive cuDNN search every
        # new shape pays a benchmark of hundreds of milliseconds
        # (`git show aa232bf:docs/BENCHMARKS.md`, the GPU's exhaustive search),
        # so the server defaults to cuDNN's heuristics; config.pbtxt's cudnn_conv_algo_search "0" asks for it.
        cuda_options = {"device_id": device_id, "cudnn_conv_algo_search": cudnn_search}
        providers = [("CUDAExecutionProvider", cuda_options), "CPUExecutionProvider"]
        _preload_cuda_libraries(ort)
    try:
        session = ort.InferenceSession(str(path), sess_options=so, providers=providers)
    except Exception as e:  # onnxruntime raises its own Fail/InvalidGraph/... types
        raise LoadError(f"onnxruntime could not load '{path}': {e}") from None
    if device == "cuda" and session.get_providers()[0] != "CUDAExecutionProvider":
        raise CudaUnavailable(
            f"CUDA was requested but onnxruntime fell back to {session.get_providers()} for '{path}': "
            "check that onnxruntime-gpu and the CUDA libraries are installed, or serve with --device cpu"
        )
    return session
