"""The server core: a model registry over a Triton-layout repository, validation, and `infer`.

This is the API both front ends (serve/protocol/http.py, serve/protocol/grpc_server.py) and the metrics endpoint
call; it speaks numpy and plain Python, never a wire format:

    core = ServerCore(CoreOptions(model_repository=Path("repo")))
    core.load()                      # blocking: builds sessions; failures become not-ready entries
    await core.start()               # on the serving event loop: starts the batcher workers
    out = await core.infer("cnn_cpu", "", {"input": x})   # -> {"logits": array with x's rows}
    await core.stop()                # refuse new work, finish in-flight, stop workers

Errors are serve.request_errors.ServeError subclasses (InvalidArgument 400, NotFound 404, Unavailable 503,
Internal 500); each carries `http_status` and `grpc_code` for the front end to answer with.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from trainserve.core.errors import UserError
from trainserve.core.options.serve import ServeOptions
from trainserve.core.version import version as trainserve_version
from trainserve.serve import repository
from trainserve.serve.model.batcher import Batcher, BatchingConfig
from trainserve.serve.datatypes import kserve_datatype
from trainserve.serve.request_errors import InvalidArgument, NotFound, ServeError, Unavailable
from trainserve.serve.model.sessions import LoadedModel, SessionOptions, TensorSpec
from trainserve.serve.engine.spin import Poller
from trainserve.serve.model.model_stats import ModelStats

log = logging.getLogger(__name__)

# Programs written for Triton check the server metadata's name; trainserve's own version goes in `version`.
SERVER_NAME = "triton"
SERVER_VERSION = trainserve_version()
# Tells this server apart from NVIDIA Triton (loadtest/model_info.py reads it): an extension name that
# Triton never reports and its clients ignore.
EMBEDDED_EXTENSION = "trainserve"
# Triton's extension names that this server implements (reported by server metadata), then the marker above
EXTENSIONS = ("binary_tensor_data", "statistics", "model_configuration", "model_repository", EMBEDDED_EXTENSION)
_VERSION_PREFIX = re.compile(r"\s*[+-]?\d+")  # what C's strtol (Triton's std::stol) reads of a version string


@dataclass(frozen=True)
class CoreOptions:
    """What the core serves and how: repository, device, threads, queue bound."""

    model_repository: Path  # Triton layout: <repo>/<model>/{config.pbtxt, <version>/model.onnx}
    device: str = ServeOptions.device  # "cpu" or "cuda" (CUDA execution provider; refusing a silent CPU fallback)
    intra_op_threads: int = ServeOptions.threads  # per session unless config.pbtxt says; 0 = the cores divided by the instance count
    inter_op_threads: int = 1  # per session unless config.pbtxt's parameters say
    max_queue_size: int = ServeOptions.max_queue_size  # waiting requests per model version before 503 / UNAVAILABLE
    max_queue_bytes: int = ServeOptions.max_queue_bytes  # waiting input bytes per model version before 503 / UNAVAILABLE
    # a request queued longer than this is answered 503 / UNAVAILABLE "Request timeout expired", seconds
    # (0 = never); config.pbtxt's dynamic_batching.default_queue_policy overrides it per model
    queue_timeout_s: float = ServeOptions.queue_timeout_s
    allow_spinning: bool = False  # let onnxruntime's pool threads busy-wait between runs (see SessionOptions)
    # After a request that took less than this, the event loop polls its sockets instead of sleeping for
    # this long while no batch runs, microseconds (0 = off): a thread woken from sleep by the kernel can add
    # ~0.3 ms to a batch-1 request, more than the model's own time (docs/BENCHMARKS.md, busy-poll).
    busy_poll_us: int = ServeOptions.busy_poll_us

    def __post_init__(self) -> None:
        SessionOptions(self.device, self.intra_op_threads, self.inter_op_threads)  # validates those three
        if self.max_queue_size < 1:
            raise UserError(f"max_queue_size={self.max_queue_size} must be >= 1")
        if self.max_queue_bytes < 1:
            raise UserError(f"max_queue_bytes={self.max_queue_bytes} must be >= 1")
        if not 0 <= self.queue_timeout_s <= 86_400:
            raise UserError(f"queue_timeout_s={self.queue_timeout_s} must be in [0, 86400] seconds")
        if not 0 <= self.busy_poll_us <= 1_000_000:
            raise UserError(f"busy_poll_us={self.busy_poll_us} must be in [0, 1000000]")


@dataclass
class ModelEntry:
    """One model version in the registry: READY with a model and batcher, or UNAVAILABLE with the reason."""

    name: str
    version: str
    state: str = "UNAVAILABLE"  # READY | UNAVAILABLE (Triton's repository-index states)
    reason: str = ""  # why it is not ready (the load error)
    model: LoadedModel | None = None
    batcher: Batcher | None = None
    config: object | None = None  # ModelConfig protobuf when it could be read
    error: Exception | None = None  # the load error behind `reason`
    stats: ModelStats = field(init=False)

    def __post_init__(self) -> None:
        self.stats = ModelStats(self.name, self.version)

    @property
    def ready(self) -> bool:
        return self.state == "READY"


@dataclass(frozen=True)
class ModelMetadata:
    """KServe model metadata, protocol-neutral: front ends encode it as JSON or ModelMetadataResponse."""

    name: str
    versions: list[str]
    platform: str
    inputs: list[TensorSpec]
    outputs: list[TensorSpec]


class ServerCore:
    """Registry + inference entry point; see the module docstring for the lifecycle."""

    name = SERVER_NAME
    version = SERVER_VERSION
    extensions = EXTENSIONS

    def __init__(self, options: CoreOptions) -> None:
        self.options = options
        self._entries: dict[str, dict[str, ModelEntry]] = {}  # model -> version -> entry
        self._latest: dict[str, str] = {}  # model -> highest READY version
        self._accepting = False
        self.draining = False  # set when shutdown begins: ready turns False while in-flight requests finish
        self.live = True
        self.frontends = 1  # front-end processes serving this core (serve/engine/model_process.py); shown in the served config
        self._batchers: list[Batcher] = []
        self._poll_ns = options.busy_poll_us * 1000
        # the loop polls its sockets instead of sleeping (serve/engine/spin.py) until a window ends or a batch runs
        # on an instance thread, which needs the core more than the loop does
        self.poller = Poller(lambda: not self._accepting or any(b.running for b in self._batchers))

    # ---------------------------------------------------------------- lifecycle
    def load(self) -> None:
        """Read the repository and build every model's sessions (blocking). A model that fails stays UNAVAILABLE.

        Raises FileNotFoundError for a missing repository directory.
        """
        repo = Path(self.options.model_repository)
        if not repo.is_dir():
            raise FileNotFoundError(f"model repository {repo} is not a directory")
        session_options = SessionOptions(
            self.options.device, self.options.intra_op_threads, self.options.inter_op_threads, self.options.allow_spinning
        )
        for model_dir in sorted(p for p in repo.iterdir() if p.is_dir() and not p.name.startswith(".")):
            name = model_dir.name
            versions = self._entries.setdefault(name, {})
            try:
                config, served = _read_model(model_dir)
                if not served:
                    raise ServeError(f"no version directory with a model file under {model_dir}")
                for v in served:
                    versions[v] = entry = ModelEntry(name, v, config=config)
                    try:
                        entry.model = LoadedModel(name, v, model_dir, config, session_options)
                        batching = BatchingConfig.from_model_config(
                            config, self.options.max_queue_size, self.options.max_queue_bytes,
                            round(self.options.queue_timeout_s * 1e6), device=self.options.device)
                        entry.batcher = Batcher(entry.model, entry.stats, batching)
                        entry.state = "READY"
                    except (ServeError, ValueError) as e:
                        entry.reason, entry.error = str(e), e
                        log.error("model %s version %s failed to load: %s", name, v, e)
            except Exception as e:  # any reason this model cannot be read: it is not ready, the others serve
                log.error("model %s failed to load: %s", name, e)
                on_disk = sorted((p.name for p in model_dir.iterdir() if p.is_dir() and p.name.isdigit()), key=int)
                for v in on_disk[-1:] or [""]:  # Triton lists the failed model's latest version, with the reason
                    versions.setdefault(v, ModelEntry(name, v, reason=str(e), error=e))
            ready = [v for v, e in versions.items() if e.ready]
            if ready:
                self._latest[name] = max(ready, key=int)

    async def start(self) -> None:
        """Start batcher workers on the running event loop and begin accepting inference."""
        for entry in self._all_entries():
            if entry.batcher is not None:
                entry.batcher.start()
        self._batchers = [e.batcher for e in self._all_entries() if e.batcher is not None]
        self._accepting = True

    async def stop(self) -> None:
        """Stop accepting (ready -> False, new infer -> Unavailable), finish queued and running batches."""
        self._accepting = False
        for entry in self._all_entries():
            if entry.batcher is not None:
                await entry.batcher.close()

    @property
    def ready(self) -> bool:
        """Accepting requests and at least one model ready (Triton with --strict-readiness=false)."""
        return self._accepting and not self.draining and bool(self._latest)

    @property
    def idle(self) -> bool:
        return all(e.batcher is None or e.batcher.idle for e in self._all_entries())

    # ---------------------------------------------------------------- registry
    def server_metadata(self) -> dict:
        """{"name", "version", "extensions"}: the same fields in HTTP JSON and gRPC ServerMetadataResponse."""
        return {"name": self.name, "version": self.version, "extensions": list(self.extensions)}

    def index(self) -> list[ModelEntry]:
        """Every model version the repository holds, with state and reason (repository index extension)."""
        return list(self._all_entries())

    def entry(self, name: str, version: str = "") -> ModelEntry:
        """The registry entry; version "" means the latest ready one. InvalidArgument for an unknown model
        and NotFound for an unknown version (Triton's codes)."""
        # Status codes and wording as Triton's (docs/serving.md, "Errors as Triton words them")
        versions = self._entries.get(name)
        if versions is None:
            raise InvalidArgument(f"Request for unknown model: '{name}' is not found")
        if not version:
            latest = self._latest.get(name)
            if latest is None:
                raise NotFound(f"Request for unknown model: '{name}' has no available versions")
            return versions[latest]
        version = parse_version(version)
        entry = versions.get(version)
        if entry is None:
            raise NotFound(f"Request for unknown model: '{name}' version {version} is not found")
        return entry

    def model_ready(self, name: str, version: str = "") -> bool:
        try:
            return self.entry(name, version).ready
        except ServeError:
            return False

    def model(self, name: str, version: str = "") -> LoadedModel:
        """The ready LoadedModel; the errors of `entry`, and Unavailable for a version that is not ready."""
        entry = self.entry(name, version)
        if entry.model is None:
            raise Unavailable(f"Request for unknown model: '{name}' version {entry.version} is not at ready state")
        return entry.model

    def model_metadata(self, name: str, version: str = "") -> ModelMetadata:
        model = self.model(name, version)
        versions = sorted((v for v, e in self._entries[name].items() if e.ready), key=int)
        platform = model.config.platform or model.config.backend
        return ModelMetadata(name, versions, platform, list(model.inputs), list(model.outputs))

    def model_config(self, name: str, version: str = ""):
        """The ModelConfig protobuf (model configuration extension), as served: with the thread layout in use,
        and `frontends`, the front-end processes parsing requests for it (loadtest/model_info.py reads it)."""
        config = self.model(name, version).served_config()
        config.parameters["frontends"].string_value = str(self.frontends)
        return config

    def statistics(self, name: str = "", version: str = "") -> list[ModelStats]:
        """Stats of one model (version "" = every ready version of it) or, with name "", of all ready versions."""
        if not name:
            return [e.stats for e in self._all_entries() if e.ready]
        if version:
            return [self.entry(name, version).stats]
        self.entry(name)  # NotFound / Unavailable for an unknown or unready model
        return [e.stats for e in self._entries[name].values() if e.ready]

    async def statistics_dicts(self, name: str = "", version: str = "") -> list[dict]:
        """statistics() in the statistics extension's JSON form; a coroutine, so that a front end in another
        process (serve/engine/remote_core.py) answers it from the model process with the same call."""
        return [s.to_dict() for s in self.statistics(name, version)]

    def _all_entries(self) -> Iterable[ModelEntry]:
        for versions in self._entries.values():
            yield from versions.values()

    # ---------------------------------------------------------------- inference
    async def infer(
        self,
        name: str,
        version: str,
        inputs: dict[str, np.ndarray],
        outputs: list[str] | None = None,
        parameters: dict | None = None,
    ) -> dict[str, np.ndarray]:
        """Run one request: validated inputs by name -> requested outputs (all when None), this request's rows only.

        BYTES tensors are numpy object arrays of `bytes`. `parameters` are accepted and currently unused.
        """
        start = time.perf_counter_ns()
        entry = self._ready_entry(name, version)
        try:
            rows = _validate(entry.model, inputs, outputs)
            result = await entry.batcher.submit(inputs, rows)
        except ServeError:
            entry.stats.record_failure(time.perf_counter_ns() - start)
            raise
        return self._succeeded(entry, start, result, outputs)

    def infer_then(self, name: str, version: str, inputs: dict[str, np.ndarray], outputs: list[str] | None,
                   done: Callable[[dict[str, np.ndarray] | None, Exception | None], None],
                   requests: int = 1) -> None:
        """`infer` without a coroutine: `done(result, None)` or `done(None, error)` is called when the request
        ends (at once, when it is refused or runs at once on the loop). The model process (serve/engine/model_process.py)
        takes every request of its front ends this way: one callback instead of a task per request.
        `requests`: how many clients' requests a front end merged into this one (serve/engine/remote_core.py); the
        statistics count each of them."""
        start = time.perf_counter_ns()
        try:
            entry = self._ready_entry(name, version)
        except ServeError as e:
            done(None, e)
            return
        try:
            rows = _validate(entry.model, inputs, outputs)
            fut = entry.batcher.enqueue(inputs, rows, requests)
        except ServeError as e:
            entry.stats.record_failure(time.perf_counter_ns() - start, requests)
            done(None, e)
            return

        def finished(f: asyncio.Future) -> None:
            e = Unavailable("the request was cancelled") if f.cancelled() else f.exception()
            if e is not None:
                entry.stats.record_failure(time.perf_counter_ns() - start, requests)
                done(None, e)
            else:
                done(self._succeeded(entry, start, f.result(), outputs, requests), None)

        if fut.done():
            finished(fut)
        else:
            fut.add_done_callback(finished)

    def _ready_entry(self, name: str, version: str) -> ModelEntry:
        entry = self.entry(name, version)
        if entry.model is None or entry.batcher is None:
            raise Unavailable(f"Request for unknown model: '{name}' version {entry.version} is not at ready state")
        if not self._accepting:
            raise Unavailable("Server is not ready: it is shutting down")
        return entry

    def _succeeded(self, entry: ModelEntry, start: int, result: dict[str, np.ndarray],
                   outputs: list[str] | None, requests: int = 1) -> dict[str, np.ndarray]:
        end = time.perf_counter_ns()
        entry.stats.record_success(end - start, requests)
        # After a request that took less than the window (a wake-up from sleep is a sizable part of its
        # latency), or one that left its batcher idle however long it ran (a lone user's next request comes
        # within the client's own time; a CPU model's batch-1 run is milliseconds). Not after the answers
        # of a batcher with work left: the loop has work, and polling then would only take CPU.
        if self._poll_ns and (end - start < self._poll_ns or (requests == 1 and entry.batcher.idle)):
            self.poller.extend(self._poll_ns)
        if outputs is None:
            return result
        return {n: result[n] for n in outputs}


def _read_model(model_dir: Path) -> tuple[object, list[str]]:
    """(ModelConfig completed as Triton would, served version names) of one model directory."""
    config = repository.read_model_config(model_dir)
    on_disk = repository.version_folders(model_dir)
    return config, [str(v) for v in repository.served_versions(config, on_disk, model_dir)]


def parse_version(text: str) -> str:
    """A requested version string as Triton reads it (std::stol: leading digits count, the rest is ignored),
    as the version folder name; InvalidArgument with Triton's wording when it is not a number >= 0."""
    m = _VERSION_PREFIX.match(text)
    if m is None or abs(int(m.group())) >= 2**63:
        raise InvalidArgument(f"failed to get model version from specified version string '{text}' (details: stol), "
                              "version should be an integral value > 0")
    number = int(m.group())
    if number < 0:
        raise InvalidArgument(f"invalid model version specified '{text}' , version should be an integral value > 0")
    return str(number)


def _names(names: Iterable[str]) -> str:
    """A list of names as Triton prints it: ['a','b']."""
    return "[" + ",".join(f"'{n}'" for n in names) + "]"


def _shape_str(shape: Iterable[int]) -> str:
    return "[" + ",".join(str(d) for d in shape) + "]"


def _validate(model: LoadedModel, inputs: dict[str, np.ndarray], outputs: list[str] | None) -> int:
    """Check names, dtypes, shapes and batch size against the model; returns the request's rows (1 when not batching)."""
    name = model.name
    for key in inputs:
        if key not in model.input_by_name:
            raise InvalidArgument(f"unexpected inference input '{key}' for model '{name}'")
    if len(inputs) != len(model.inputs):
        missing = [t.name for t in model.inputs if t.name not in inputs]
        raise InvalidArgument(
            f"expected {len(model.inputs)} inputs but got {len(inputs)} inputs for model '{name}'. "
            f"Got input(s) {_names(sorted(inputs))}, but missing required input(s) {_names(missing)}. "
            "Please provide all required input(s)."
        )
    rows = 1
    batched = model.max_batch_size > 0
    for i, spec in enumerate(model.inputs):
        array = inputs[spec.name]
        datatype = kserve_datatype(array)
        if datatype != spec.datatype:
            raise InvalidArgument(
                f"inference input '{spec.name}' data-type is '{datatype}', but model '{name}' expects '{spec.datatype}'"
            )
        shape = array.shape
        if len(shape) != len(spec.shape) or any(d != s and s != -1 for d, s in zip(shape, spec.shape)):
            raise InvalidArgument(
                f"unexpected shape for input '{spec.name}' for model '{name}'. "
                f"Expected {_shape_str(spec.shape)}, got {_shape_str(shape)}"
            )
        if batched:
            if i == 0:
                rows = shape[0]
            elif shape[0] != rows:
                raise InvalidArgument(
                    f"input '{spec.name}' batch size {shape[0]} does not match other inputs' batch size {rows} for model '{name}'"
                )
    if batched:
        if rows > model.max_batch_size:
            raise InvalidArgument(f"inference request batch-size must be <= {model.max_batch_size} for '{name}'")
        if rows < 1:
            raise InvalidArgument(f"inference request batch-size must be >= 1 for '{name}'")
    if outputs is not None:
        for out in outputs:
            if out not in model.output_by_name:
                raise InvalidArgument(f"unexpected inference output '{out}' for model '{name}'")
    return rows
