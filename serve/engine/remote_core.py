"""The core as a front-end process sees it: ServerCore's API, answered from a snapshot or by the model process.

A front-end process (serve/engine/frontend_proc.py) runs the unchanged HTTP and gRPC front ends over a
RemoteCore. The registry cannot change while serving (no model load/unload), so metadata, configs,
the index and readiness are answered from the snapshot the model process sends once at start; only
`infer` and the statistics go to the model process (serve/engine/model_process.py), over the control channel
(serve/engine/ipc.py) with tensors in the shared arena (serve/engine/shm.py).

Requests merged (`MERGE_ENV`, on by default). Under load a front end's loop takes many requests in one
turn, and the model process's one loop pays tens of microseconds of Python for each message (parse,
validate, queue, answer): with one message per request that loop, at ~0.9 of a core, bounds a GPU's
batch-1 capacity. So the first request of a loop turn goes at once (a lone request waits for nothing), and the
ones after it in the same turn that could share a batch (same model, version, outputs, dtypes and
non-batch shapes, valid for the model) are joined along dim 0 and sent at the start of the next turn as
one request of their rows, at most the model's max_batch_size; the answer is split back by rows. The
model process counts each of them in its statistics (ipc.INFER's `requests`), so requests, queue and
compute per request stay the clients' figures. A request that is not valid for the model is never
merged: it goes alone and gets its own error.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Callable

import numpy as np

from trainserve.core import envs
from trainserve.serve.engine import ipc, shm, spin
from trainserve.serve import repository
from trainserve.serve.engine.server_core import ModelEntry, ModelMetadata, ServerCore
from trainserve.serve.request_errors import ServeError, Unavailable

log = logging.getLogger(__name__)

MERGE_ENV = envs.SERVE_MERGE.name  # "0": every request its own message (for measurements); else merged
MERGE_KEYS_MAX = 4096  # request signatures whose mergeability is remembered


class _Group:
    """Requests of one loop turn that go to the model process as one: (inputs, rows, future) each."""

    __slots__ = ("name", "version", "outputs", "max_rows", "members", "rows")

    def __init__(self, name: str, version: str, outputs: list[str] | None, max_rows: int) -> None:
        self.name, self.version, self.outputs, self.max_rows = name, version, outputs, max_rows
        self.members: list[tuple[dict[str, np.ndarray], int, asyncio.Future]] = []
        self.rows = 0


def registry_snapshot(core: ServerCore) -> dict:
    """What a front end needs to answer everything but infer and statistics, as plain picklable values."""
    entries = core.index()
    snapshot: dict = {"server_metadata": core.server_metadata(), "frontends": core.frontends,
                      "entries": [(e.name, e.version, e.state, e.reason) for e in entries],
                      "metadata": {}, "configs": {}, "outputs": {}}
    for e in entries:
        if e.ready:
            key = (e.name, e.version)
            meta = core.model_metadata(e.name, e.version)
            snapshot["metadata"][key] = meta
            # serialized: the protobuf class does not pickle (tritonclient's generated module is not importable by
            # the name its classes carry)
            snapshot["configs"][key] = core.model_config(e.name, e.version).SerializeToString()
            max_batch = e.model.max_batch_size
            snapshot["outputs"][key] = (max_batch, [(t.dtype.str if t.datatype != "BYTES" else "O", tuple(t.shape))
                                                    for t in meta.outputs])
    return snapshot


class RemoteCore:
    """The methods the HTTP and gRPC front ends call on ServerCore, for a front end in its own process."""

    # The registry lookups are ServerCore's own (the same errors and wording), over the snapshot's entries.
    entry = ServerCore.entry
    model_ready = ServerCore.model_ready

    def __init__(self, snapshot: dict, arena: shm.Arena, on_engine_gone: Callable[[], None]) -> None:
        meta = snapshot["server_metadata"]
        self.name, self.version, self.extensions = meta["name"], meta["version"], tuple(meta["extensions"])
        self.frontends = snapshot["frontends"]
        self._entries: dict[str, dict[str, ModelEntry]] = {}
        self._latest: dict[str, str] = {}
        for name, version, state, reason in snapshot["entries"]:
            self._entries.setdefault(name, {})[version] = ModelEntry(name, version, state, reason)
            if state == "READY" and int(self._latest.get(name, "-1")) < int(version):
                self._latest[name] = version
        self._metadata: dict[tuple[str, str], ModelMetadata] = snapshot["metadata"]
        config_class = repository._pb2().ModelConfig
        self._configs = {key: config_class.FromString(raw) for key, raw in snapshot["configs"].items()}
        self._outputs: dict = snapshot["outputs"]
        self._room: dict[tuple[str, str, int], int] = {}  # (model, version asked, rows) -> _output_room's answer
        self.arena = arena
        self.link: ipc.Link | None = None
        self._pending: dict[int, tuple[asyncio.Future, tuple[int, int] | None]] = {}
        self._rid = 0
        self._accepting = False
        self.draining = False
        self.live = True
        self._on_engine_gone = on_engine_gone
        # busy-polling (serve/engine/spin.py), as the model process chose it for this host
        plan = spin.SpinPlan(*snapshot.get("spin", (0, 0, False)))
        self._after_ns, self._wait_ns = plan.after_us * 1000, plan.wait_us * 1000
        self._wait_any = plan.any_in_flight  # poll for answers however many requests are in flight
        self.poller = spin.Poller(lambda: not self.live)
        self._merge = envs.SERVE_MERGE.get()
        self._turn = False  # a request left this loop turn: the next ones of the turn may be merged
        self._groups: dict[tuple, _Group] = {}
        self._merge_rows: dict[tuple, int] = {}  # signature -> the model's max_batch_size, 0 when not mergeable

    # ---------------------------------------------------------------- lifecycle (serve/engine/server.py's Server calls these)
    async def start(self) -> None:
        self._accepting = True

    async def stop(self) -> None:
        self._accepting = False

    @property
    def ready(self) -> bool:
        return self._accepting and not self.draining and bool(self._latest) and self.live

    # ---------------------------------------------------------------- registry, from the snapshot
    def server_metadata(self) -> dict:
        return {"name": self.name, "version": self.version, "extensions": list(self.extensions)}

    def index(self) -> list[ModelEntry]:
        return [e for versions in self._entries.values() for e in versions.values()]

    def _ready_key(self, name: str, version: str) -> tuple[str, str]:
        entry = self.entry(name, version)
        if not entry.ready:
            raise Unavailable(f"Request for unknown model: '{name}' version {entry.version} is not at ready state")
        return entry.name, entry.version

    def model_metadata(self, name: str, version: str = "") -> ModelMetadata:
        return self._metadata[self._ready_key(name, version)]

    def model_config(self, name: str, version: str = ""):
        return self._configs[self._ready_key(name, version)]

    # ---------------------------------------------------------------- through the model process
    async def statistics_dicts(self, name: str = "", version: str = "") -> list[dict]:
        return await self._send(*ipc.encode(ipc.Call("statistics", (name, version))), None)

    async def infer(self, name: str, version: str, inputs: dict[str, np.ndarray], outputs: list[str] | None = None,
                    parameters: dict | None = None) -> dict[str, np.ndarray]:
        """ServerCore.infer, run by the model process: the inputs are written into this front end's arena;
        merged with others of this loop turn when it is not the turn's first (see the module docstring)."""
        if not self._accepting:
            raise Unavailable("Server is not ready: it is shutting down")
        if self._merge:
            if self._turn:
                group = self._group_for(name, version, inputs, outputs)
                if group is not None:
                    fut = asyncio.get_running_loop().create_future()
                    group.members.append((inputs, next(iter(inputs.values())).shape[0], fut))
                    return await fut
            else:
                self._turn = True
                asyncio.get_running_loop().call_soon(self._end_turn)
        return await self._submit(name, version, inputs, outputs, 1)

    def _group_for(self, name: str, version: str, inputs: dict[str, np.ndarray],
                   outputs: list[str] | None) -> _Group | None:
        """The open group this request joins (a full one is sent first), or None when it cannot be merged."""
        key = (name, version, None if outputs is None else tuple(outputs),
               tuple((n, a.dtype.str, a.shape[1:]) for n, a in inputs.items()))
        max_rows = self._merge_rows.get(key)
        if max_rows is None:
            max_rows = self._mergeable(name, version, inputs, outputs) if len(self._merge_rows) < MERGE_KEYS_MAX else 0
            self._merge_rows[key] = max_rows
        if not max_rows:
            return None
        rows = -1
        for a in inputs.values():
            if rows < 0:
                rows = a.shape[0]
            elif a.shape[0] != rows:
                return None  # the model process says what is wrong
        if not 1 <= rows <= max_rows:
            return None
        group = self._groups.get(key)
        if group is not None and group.rows + rows > max_rows:
            del self._groups[key]
            self._send_group(group)
            group = None
        if group is None:
            group = self._groups[key] = _Group(name, version, outputs, max_rows)
        group.rows += rows
        return group

    def _mergeable(self, name: str, version: str, inputs: dict[str, np.ndarray], outputs: list[str] | None) -> int:
        """The model's max_batch_size when requests of this signature are valid for it and can be joined
        along dim 0 (numbers only, a batching model), else 0."""
        try:
            key = self._ready_key(name, version)
        except ServeError:
            return 0
        max_batch = self._outputs.get(key, (0, []))[0]
        meta = self._metadata[key]
        specs = {t.name: t for t in meta.inputs}
        if max_batch <= 0 or set(inputs) != set(specs) or len(inputs) != len(specs):
            return 0
        for n, a in inputs.items():
            spec = specs[n]
            if spec.datatype == "BYTES" or a.dtype == object or a.dtype != spec.dtype or a.ndim != len(spec.shape):
                return 0
            if any(d != s and s != -1 for d, s in zip(a.shape[1:], spec.shape[1:])):
                return 0
        names = {t.name for t in meta.outputs}
        if outputs is not None and any(o not in names for o in outputs):
            return 0
        return max_batch

    def _end_turn(self) -> None:
        """The next loop turn began: send this turn's groups."""
        self._turn = False
        groups, self._groups = self._groups, {}
        for group in groups.values():
            self._send_group(group)

    def _send_group(self, group: _Group) -> None:
        """One message for the group's requests (their rows joined), the answer split back into their futures."""
        members = group.members
        try:
            if len(members) == 1:
                inputs = members[0][0]
            else:
                inputs = {n: np.concatenate([m[0][n] for m in members]) for n in members[0][0]}
            fut = self._submit(group.name, group.version, inputs, group.outputs, len(members))
        except Exception as e:  # the model process is gone, or a bug: each request fails with it
            for _, _, f in members:
                if not f.done():
                    f.set_exception(e)
            return

        def split(done: asyncio.Future) -> None:
            error = Unavailable("the request was cancelled") if done.cancelled() else done.exception()
            if error is not None:
                for _, _, f in members:
                    if not f.done():
                        f.set_exception(error)
                return
            result = done.result()
            if len(members) == 1:
                if not members[0][2].done():
                    members[0][2].set_result(result)
                return
            start = 0
            for _, rows, f in members:
                if not f.done():  # the client may have gone away
                    f.set_result({n: a[start:start + rows] for n, a in result.items()})
                start += rows

        fut.add_done_callback(split)

    def _submit(self, name: str, version: str, inputs: dict[str, np.ndarray], outputs: list[str] | None,
                requests: int) -> asyncio.Future:
        """Write the inputs into the arena and send the request (`requests` clients' requests); its future."""
        sizes = [shm.aligned(a.nbytes) if a.dtype != object else 0 for a in inputs.values()]
        in_bytes = sum(sizes)
        need = in_bytes + self._output_bytes(name, version, inputs)
        block = self.arena.alloc(need) if need else None
        tensors = []
        if block is None:
            tensors = [ipc.inline_tensor(n, a) for n, a in inputs.items()]
            out_offset, out_cap = -1, 0
        else:
            pos = block[0]
            mm = self.arena.mm
            for (n, a), size in zip(inputs.items(), sizes):
                if a.dtype == object:
                    tensors.append(ipc.inline_tensor(n, a))
                    continue
                shm.view(mm, pos, a.dtype.str, a.shape)[...] = a
                tensors.append(ipc.arena_tensor(n, a, pos))
                pos += size
            out_offset, out_cap = pos, block[0] + block[1] - pos
        kind, body = ipc.encode(ipc.Infer(name, version, tuple(tensors), None if outputs is None else tuple(outputs),
                                          out_offset, out_cap, requests))
        return self._send(kind, body, block)

    def _send(self, kind: int, body: bytes, block: tuple[int, int] | None) -> asyncio.Future:
        """Send one message; the future of its answer (Unavailable at once when the model process is gone)."""
        if self.link is None or self.link.closed:
            if block is not None:
                self.arena.free(block)
            raise Unavailable("the model process is not running")
        self._rid = rid = (self._rid + 1) & 0xFFFFFFFF
        fut = asyncio.get_running_loop().create_future()
        # the block stays taken until the answer comes, even when the caller gives up waiting: the model
        # process may still read its inputs and write its outputs there
        self._pending[rid] = (fut, block)
        self.link.send(kind, rid, body)
        if not self._wait_ns:
            # the request the window after an answer waited for came: stop, the model process may need the
            # cores (a CPU session's intra-op threads use them all while it runs)
            self.poller.stop()
        elif len(self._pending) == 1 or self._wait_any:
            # a lone request: poll for its answer rather than sleep (with more in flight the loop has work,
            # unless TRAINSERVE_SERVE_SPIN=2 asks to poll anyway)
            self.poller.extend(self._wait_ns)
        return fut

    def _output_bytes(self, name: str, version: str, inputs: dict[str, np.ndarray]) -> int:
        """Room to leave for the outputs (0: unknown sizes, or none; they then come in the reply), bytes."""
        first = next(iter(inputs.values()), None)
        key = (name, version, first.shape[0] if first is not None and first.ndim else 1)
        known = self._room.get(key)
        if known is None:
            known = self._room[key] = self._output_room(name, version, key[2]) if len(self._room) < 4096 else 0
        return known

    def _output_room(self, name: str, version: str, rows: int) -> int:
        try:
            entry = self.entry(name, version)
        except ServeError:
            return 0  # the model process answers the error
        known = self._outputs.get((entry.name, entry.version))
        if known is None:
            return 0
        max_batch, outputs = known
        rows = rows if max_batch > 0 else 1
        total = 0
        for dtype, shape in outputs:
            if dtype == "O":
                continue
            dims = [rows if (i == 0 and max_batch > 0) else d for i, d in enumerate(shape)]
            if any(d < 0 for d in dims):
                return 0
            total += shm.aligned(math.prod(dims) * np.dtype(dtype).itemsize)
        return total

    # ---------------------------------------------------------------- the channel's callbacks
    def on_message(self, kind: int, rid: int, body: bytes) -> None:
        item = self._pending.pop(rid, None)
        if item is None:
            return
        fut, block = item
        try:
            message = ipc.decode(kind, body)
            if kind == ipc.OK:
                result, error = self._outputs_of(message), None
            elif kind == ipc.ERROR:
                result, error = None, ipc.raise_error(message)
            elif kind == ipc.RESULT:
                result, error = message.value, None
            else:
                raise ValueError(f"a {type(message).__name__} message is no reply")
        except Exception as e:  # a reply this side cannot read: that request fails, the others go on
            log.exception("unreadable reply from the model process")
            result, error = None, Unavailable(f"unreadable reply from the model process: {e}")
        finally:
            if block is not None:
                self.arena.free(block)
        if not fut.done():
            if error is not None:
                fut.set_exception(error)
            else:
                fut.set_result(result)
        if self._after_ns and (not self._pending or self._wait_any):
            # the last answer this front end waited for: the client's next request is likely to come soon.
            # Not under load (requests still in flight): the loop has work, and a front end polling all the
            # time would look CPU-bound to the served figures' attribution.
            self.poller.extend(self._after_ns)

    def _outputs_of(self, answer: ipc.Answer) -> dict[str, np.ndarray]:
        """The reply's tensors, copied out of the arena (its block is given back right after)."""
        mm = self.arena.mm
        out = {}
        for name, dtype, shape, offset, data in answer.tensors:
            out[name] = shm.view(mm, offset, dtype, shape).copy() if offset >= 0 else ipc.inline_array(dtype, shape, data)
        return out

    def on_lost(self) -> None:
        """The model process is gone: every waiting request fails now, and this front end stops."""
        self.live = False
        self.poller.stop()
        pending, self._pending = self._pending, {}
        for fut, _ in pending.values():
            if not fut.done():
                fut.set_exception(Unavailable("the model process stopped"))
        self._on_engine_gone()
