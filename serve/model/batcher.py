"""Dynamic batching: requests of many clients joined along dim 0 into one session run, split back after.

One worker coroutine per model instance takes requests from one bounded queue, gathers a batch
(per config.pbtxt's dynamic_batching: max_batch_size, preferred_batch_size,
max_queue_delay_microseconds), and runs it on that instance's own thread so the event loop stays
free. A full queue answers Unavailable at once instead of growing memory.

The policy (docs/serving.md, "Dynamic batching"): a request that finds an instance free runs at once;
requests that arrive while every instance is busy queue up and form the next batch. The queue delay
is spent waiting for company only while another instance is busy or a preferred size is nearly
reached, and the measured arrival rate says that size (or max_batch_size) will come before the delay
runs out; so a lone request never waits for it. Triton instead waits up to the delay whenever a
preferred size has not been reached. A short run of a lone request happens on the loop itself, and
the rule for that (Batcher._on_loop) cannot confirm itself under load.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

from trainserve.serve.model.buckets import pad_rows
from trainserve.serve.request_errors import Internal, ServeError, Unavailable
from trainserve.serve.model.sessions import LoadedModel, config_param
from trainserve.serve.model.model_stats import ModelStats
from trainserve.core.errors import UserError
from trainserve.core.options.serve import ServeOptions


# A lone request to a CPU model runs on the event loop if its size ran faster than this (a GPU model's:
# BatchingConfig.idle_inline_max_us). On a CPU the session's intra-op threads take every core while it runs, so
# the loop could do little meanwhile, and the hand-off to the instance's thread and back costs two thread
# wake-ups per request (0.2 ms of batch-1 p50 on the 2-core VM). Lone runs cannot hold the loop under load:
# Batcher._on_loop. The bound keeps /metrics and health answering within a model's longest lone run.
CPU_IDLE_INLINE_MAX_US = 50_000


@dataclass(frozen=True)
class BatchingConfig:
    """How one model's requests are batched (from its config.pbtxt, plus the server's queue bound)."""

    max_batch_size: int = 0  # rows per run; 0 = the model does not batch (dim 0 is not a batch dim)
    dynamic: bool = False  # config.pbtxt has a dynamic_batching block: join requests of many clients
    preferred_batch_sizes: tuple[int, ...] = ()  # run as soon as one of these row counts is reached and nothing more waits
    max_queue_delay_microseconds: int = 0  # how long the first request of a batch may wait for company, microseconds
    max_queue_size: int = ServeOptions.max_queue_size  # requests waiting per model; beyond it requests are refused (503)
    max_queue_bytes: int = ServeOptions.max_queue_bytes  # input bytes waiting per model; beyond it requests are refused (503)
    queue_timeout_us: int = round(ServeOptions.queue_timeout_s * 1e6)  # a request still queued after this is refused (503); 0 = never
    inline_max_us: int = 200  # run a batch on the event loop itself when its size ran faster than this, microseconds
    idle_inline_max_us: int = 2000  # ... or faster than this while no other request waits, microseconds
    # (CPU_IDLE_INLINE_MAX_US for a CPU model: from_model_config)

    def __post_init__(self) -> None:
        if self.max_batch_size < 0:
            raise UserError(f"max_batch_size={self.max_batch_size} must be >= 0")
        if self.max_queue_delay_microseconds < 0:
            raise UserError(f"max_queue_delay_microseconds={self.max_queue_delay_microseconds} must be >= 0")
        if self.inline_max_us < 0:
            raise UserError(f"inline_max_us={self.inline_max_us} must be >= 0")
        if self.idle_inline_max_us < 0:
            raise UserError(f"idle_inline_max_us={self.idle_inline_max_us} must be >= 0")
        if self.max_queue_size < 1:
            raise UserError(f"max_queue_size={self.max_queue_size} must be >= 1")
        if self.max_queue_bytes < 1:
            raise UserError(f"max_queue_bytes={self.max_queue_bytes} must be >= 1")
        if self.queue_timeout_us < 0:
            raise UserError(f"queue_timeout_us={self.queue_timeout_us} must be >= 0")
        bad = [p for p in self.preferred_batch_sizes if not 0 < p <= max(self.max_batch_size, 1)]
        if bad:
            raise UserError(f"preferred_batch_sizes={bad} must lie in [1, max_batch_size={self.max_batch_size}]")

    @classmethod
    def from_model_config(cls, config, max_queue_size: int, max_queue_bytes: int = 256 << 20,
                          queue_timeout_us: int = 10_000_000, device: str = "cuda") -> BatchingConfig:
        """From config.pbtxt and the server's queue bounds; dynamic_batching's default_queue_policy (Triton's
        REJECT action with default_timeout_microseconds) sets the model's own queue timeout. On `device`
        "cpu" a lone request runs on the loop up to CPU_IDLE_INLINE_MAX_US unless the config says otherwise."""
        db = config.dynamic_batching
        has_db = config.HasField("dynamic_batching") and config.max_batch_size > 0
        policy = db.default_queue_policy
        if has_db and db.HasField("default_queue_policy") and policy.default_timeout_microseconds > 0 \
                and policy.timeout_action == 0:  # REJECT; DELAY (1) keeps the request, as no timeout would
            queue_timeout_us = policy.default_timeout_microseconds
        # this server's config.pbtxt parameters (Triton ignores them): how short a run may be to run on the
        # event loop (inline_max_us: a queued batch, one instance; idle_inline_max_us: while the batcher is
        # idle); 0 sends every such run to the instance threads
        idle = {"idle_inline_max_us": CPU_IDLE_INLINE_MAX_US} if device == "cpu" else {}
        for key in ("inline_max_us", "idle_inline_max_us"):
            if (text := config_param(config, key)) is not None:
                try:
                    idle[key] = int(text)
                except ValueError:
                    raise ValueError(f"model '{config.name}': parameter {key} is {text!r}; "
                                     "use a whole number of microseconds") from None
        return cls(
            max_batch_size=config.max_batch_size,
            dynamic=has_db,
            preferred_batch_sizes=tuple(sorted(db.preferred_batch_size)) if has_db else (),
            max_queue_delay_microseconds=db.max_queue_delay_microseconds if has_db else 0,
            max_queue_size=max_queue_size,
            max_queue_bytes=max_queue_bytes,
            queue_timeout_us=queue_timeout_us,
            **idle,
        )


@dataclass(eq=False)
class _Request:
    inputs: dict[str, np.ndarray]
    rows: int  # dim-0 size when batching, else 1
    key: tuple  # requests join only when their non-batch shapes match
    future: asyncio.Future | None  # None for a request run directly, without the queue
    enqueued_ns: int = field(default_factory=time.perf_counter_ns)
    nbytes: int = 0  # input bytes, counted against the queue's byte bound
    requests: int = 1  # clients' requests it holds (a front end's merged requests: serve/engine/remote_core.py)


NEARLY_FRACTION = 4  # a batch is "nearly" a preferred size when at most 1/4 of that size is missing
GAP_CAP_DELAYS = 4  # an idle gap weighs in the arrival-gap average as at most this many queue delays
LONE_CREDIT = 16  # runs on the loop granted by one run on a thread that no other request came during (_on_loop)
# ... as loop time, ns: each run spends its expected time, at least LONE_CREDIT_MIN_NS (the GPU's default
# idle_inline_max_us), so short runs get LONE_CREDIT runs and a CPU model's long ones fewer. A burst that comes
# just after a run on the thread is read one request at a time while the credit lasts, and a CPU model's lone
# request may run on the loop up to CPU_IDLE_INLINE_MAX_US: bounded in time, not only in runs.
LONE_CREDIT_MIN_NS = 2_000_000
LONE_CREDIT_NS = LONE_CREDIT * LONE_CREDIT_MIN_NS


class _Queue:
    """A bounded FIFO that worker coroutines wait on; put never blocks (it refuses when full)."""

    def __init__(self, maxsize: int, maxbytes: int = 256 << 20) -> None:
        self.items: deque[_Request] = deque()
        self.maxsize = maxsize
        self.maxbytes = maxbytes
        self.nbytes = 0  # input bytes of the queued requests
        self.closed = False
        self._waiters: list[asyncio.Future] = []

    def put(self, req: _Request) -> None:
        if len(self.items) >= self.maxsize:
            raise Unavailable(f"exceeds maximum queue size of {self.maxsize}")
        if self.items and self.nbytes + req.nbytes > self.maxbytes:  # an empty queue takes any one request
            raise Unavailable(f"exceeds maximum queue size of {self.maxbytes} bytes")
        self.items.append(req)
        self.nbytes += req.nbytes
        self.wake()

    def pop(self) -> _Request:
        req = self.items.popleft()
        self.nbytes -= req.nbytes
        return req

    def wake(self) -> None:
        waiters, self._waiters = self._waiters, []
        for w in waiters:
            if not w.done():
                w.set_result(None)

    async def wait(self, timeout_s: float | None = None) -> None:
        """Return when an item may be available, the queue closed, or timeout_s passed."""
        if self.items or self.closed:
            return
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        self._waiters.append(fut)
        handle = loop.call_later(timeout_s, _resolve, fut) if timeout_s is not None else None
        try:
            await fut
        finally:
            if handle is not None:
                handle.cancel()


def _resolve(fut: asyncio.Future) -> None:
    if not fut.done():
        fut.set_result(None)


def _expire(req: _Request) -> None:
    """Refuse a request queued past its deadline (every instance was busy that long) now, as Triton's REJECT
    queue policy does, rather than answer it minutes late."""
    if not req.future.done():
        req.future.set_exception(Unavailable("Request timeout expired"))


class Batcher:
    """Queue + one worker per instance of one model version. `submit()` returns this request's outputs."""

    def __init__(self, model: LoadedModel, stats: ModelStats, config: BatchingConfig) -> None:
        self.model = model
        self.stats = stats
        self.config = config
        self._queue = _Queue(config.max_queue_size, config.max_queue_bytes)
        self._executors = [
            ThreadPoolExecutor(1, thread_name_prefix=f"{model.name}-{i}") for i in range(model.instance_count)
        ]
        self._workers: list[asyncio.Task] = []
        self._busy = 0  # batches being run right now
        # rows -> moving average of session-run time, ns. Handing a batch to the instance's thread costs
        # ~0.1-0.3 ms of wake-ups on a busy CPU; a batch that runs faster than that runs on the loop itself.
        self._run_ns: dict[int, float] = {}
        self._inline_ns = config.inline_max_us * 1000 if model.instance_count == 1 else 0
        # While nothing runs and nothing waits, a short batch runs on the loop whatever the instance count:
        # no other instance could have used the time.
        self._idle_inline_ns = config.idle_inline_max_us * 1000
        # when the last run ended and the loop was free to read requests again, ns (_on_loop)
        self._idle_since_ns = 0
        # loop time (ns) still allowed to requests that came sooner after the last run than a run takes
        # (_on_loop): granted by a run on the thread during which no other request came, spent by each run
        self._lone_credit_ns = 0.0
        self._submits = 0  # requests submitted so far: did any come while a run was on the thread?
        self._last_submit_ns = 0
        # moving average of the time between two submits, ns: how soon company can be expected. One long
        # idle gap counts as at most GAP_CAP_DELAYS queue delays, so load that resumes is noticed quickly.
        self._gap_ns = float("inf")
        self._gap_cap_ns = GAP_CAP_DELAYS * max(config.max_queue_delay_microseconds, 1) * 1000
        self._targets = sorted(set(config.preferred_batch_sizes) | {config.max_batch_size})

    def start(self) -> None:
        """Start the worker coroutines on the running event loop."""
        self._workers = [asyncio.create_task(self._worker(i)) for i in range(self.model.instance_count)]

    @property
    def queued(self) -> int:
        return len(self._queue.items)

    @property
    def running(self) -> bool:
        """A batch is being run right now (on an instance thread or the loop)."""
        return self._busy > 0

    @property
    def idle(self) -> bool:
        return not self._queue.items and self._busy == 0

    async def submit(self, inputs: dict[str, np.ndarray], rows: int) -> dict[str, np.ndarray]:
        """Queue one validated request (`rows` rows along dim 0) and wait for all model outputs (its rows only)."""
        return await self.enqueue(inputs, rows)

    def enqueue(self, inputs: dict[str, np.ndarray], rows: int, requests: int = 1) -> asyncio.Future:
        """`submit` without a coroutine: the future of this request's outputs (already done when it ran at
        once, on the loop); refusals (queue full, shutting down) raise here. The model process calls it
        for every request of its front ends (ServerCore.infer_then), with no task per request; `requests`:
        how many clients' requests a front end merged into this one (counted so in the statistics)."""
        loop = asyncio.get_running_loop()
        if self._queue.closed:
            raise Unavailable("server is shutting down")
        now = time.perf_counter_ns()
        since, self._last_submit_ns = now - self._last_submit_ns, now
        if since < now:  # not the first request: there is a gap to learn from
            gap = min(since, self._gap_cap_ns)
            self._gap_ns = gap if self._gap_ns == float("inf") else 0.8 * self._gap_ns + 0.2 * gap
        # A request that finds the batcher idle may run at once inside submit(), skipping the queue, a
        # future and two event-loop turns, when it would run on the loop anyway and waiting for company
        # is not worth it.
        self._submits += 1
        idle = self._busy == 0 and not self._queue.items
        if not idle:
            self._lone_credit_ns = 0  # company: this request came while another waits or runs
        elif not self._worth_waiting(rows, rows, self.config.max_queue_delay_microseconds * 1000) \
                and self._on_loop(rows, 1, now, queued=False):
            fut = loop.create_future()
            try:
                fut.set_result(self._run_direct(inputs, rows, requests))
            except ServeError as e:
                fut.set_exception(e)
            return fut
        key = tuple((n, a.shape[1:]) for n, a in inputs.items()) if self.config.max_batch_size else ()
        fut = loop.create_future()
        self._queue.put(_Request(inputs, rows, key, fut, nbytes=sum(a.nbytes for a in inputs.values()),
                                 requests=requests))
        return fut

    async def close(self) -> None:
        """Refuse new requests, finish every queued and running one, then stop the workers and threads."""
        self._queue.closed = True
        self._queue.wake()
        if self._workers:
            await asyncio.gather(*self._workers, return_exceptions=True)
        for ex in self._executors:
            ex.shutdown(wait=True)

    async def _worker(self, instance: int) -> None:
        """One instance's serving loop, read aloud: take the oldest request (refused if it waited past the queue
        timeout), gather company for it, run the batch (joined and padded to the model's bucket, run, split
        back into each request's rows) on the loop or the instance's thread, answer each request."""
        cfg, queue = self.config, self._queue
        loop = asyncio.get_running_loop()
        executor = self._executors[instance]
        largest_preferred = max(cfg.preferred_batch_sizes, default=0)
        delay_ns = cfg.max_queue_delay_microseconds * 1000
        timeout_ns = cfg.queue_timeout_us * 1000
        while True:
            while not queue.items:
                if queue.closed:
                    return
                await queue.wait()
            first = queue.pop()
            if timeout_ns and time.perf_counter_ns() - first.enqueued_ns > timeout_ns:
                _expire(first)
                continue
            batch = [first]
            rows = await self._gather(batch, delay_ns, largest_preferred) if cfg.dynamic else first.rows
            start = time.perf_counter_ns()
            on_loop = self._on_loop(rows, len(batch), first.enqueued_ns, queued=True)
            self._busy += 1
            try:
                if on_loop:
                    results, input_ns, infer_ns, output_ns = self._execute(instance, batch, rows)
                else:
                    results, input_ns, infer_ns, output_ns = await self._execute_on_thread(
                        loop, executor, instance, batch, rows)
            except Exception as e:
                self._fail(batch, e)
                continue
            finally:
                self._ran()
            self._answer(batch, rows, start, results, input_ns, infer_ns, output_ns)

    async def _gather(self, batch: list[_Request], delay_ns: int, largest_preferred: int) -> int:
        """Join to `batch` (its first request alone so far) the queued requests of the same shapes, up to
        max_batch_size rows, waiting for more only while _worth_waiting says company will come within the
        first request's queue delay; the batch's rows."""
        cfg, queue = self.config, self._queue
        first = batch[0]
        rows = first.rows
        deadline = first.enqueued_ns + delay_ns
        while rows < cfg.max_batch_size:
            if queue.items:
                nxt = queue.items[0]
                if nxt.key != first.key or rows + nxt.rows > cfg.max_batch_size:
                    break
                batch.append(queue.pop())
                rows += nxt.rows
                if largest_preferred and rows >= largest_preferred:
                    break
                continue
            if rows in cfg.preferred_batch_sizes or queue.closed:
                break
            remaining = deadline - time.perf_counter_ns()
            if remaining <= 0 or not self._worth_waiting(rows, first.rows, remaining):
                break
            await queue.wait(remaining / 1e9)
            if not queue.items:
                break  # the delay ran out with nobody new
        return rows

    async def _execute_on_thread(self, loop: asyncio.AbstractEventLoop, executor: ThreadPoolExecutor, instance: int,
                                 batch: list[_Request], rows: int):
        """_execute with the session run on the instance's thread: joined and padded here, split back here, the
        thread only runs the session. Its Python work would hold the GIL in small pieces, each waiting behind
        this busy loop (joining a batch of ~30 measured 1.1-2.3 ms on the thread, 0.07 ms here;
        docs/BENCHMARKS.md)."""
        submits = self._submits
        feed, input_ns = self._join(batch, rows)
        outs, infer_ns = await loop.run_in_executor(executor, self._run, instance, feed, rows)
        results, output_ns = self._split(batch, outs)
        if self._submits == submits and len(batch) == 1:  # the loop was free and nobody came
            self._lone_credit_ns = LONE_CREDIT_NS
        return results, input_ns, infer_ns, output_ns

    def _fail(self, batch: list[_Request], e: Exception) -> None:
        """The batch's run failed: each request still waiting gets the error (onnxruntime's as Internal)."""
        err = e if isinstance(e, ServeError) else self._model_failed(e)
        for r in batch:
            if not r.future.done():
                r.future.set_exception(err)

    def _answer(self, batch: list[_Request], rows: int, start: int, results: list[dict[str, np.ndarray]],
                input_ns: int, infer_ns: int, output_ns: int) -> None:
        """The batch ran (from `start`, ns): its times noted and counted, each request answered with its rows."""
        self._note_run(rows, infer_ns)
        self.stats.record_execution(rows, sum(r.requests for r in batch),
                                    sum((start - r.enqueued_ns) * r.requests for r in batch),
                                    input_ns, infer_ns, output_ns)
        for r, res in zip(batch, results):
            if not r.future.done():  # the client may have gone away
                r.future.set_result(res)

    def _on_loop(self, rows: int, requests: int, arrived_ns: int, queued: bool) -> bool:
        """Whether a batch of `rows` rows (`requests` requests, the first arrived at `arrived_ns`) runs on the
        event loop itself instead of its instance's thread; for a request not yet `queued` that finds the
        batcher idle, whether it runs at once, skipping the queue.

        Handing a batch to the instance's thread costs two thread wake-ups (~0.1-0.3 ms on a busy CPU); a
        run on the loop holds the loop that long, reading no request. So on the loop:
        - a queued batch whose size ran faster than inline_max_us (one instance): no longer than a hand-off;
        - a lone request whose size ran faster than idle_inline_max_us. Lone: nothing else waits or runs,
          and either the batcher had been idle for longer than that run before it came, or a recent run
          on the thread showed nobody else (a lone credit, below).
        Why idle time since the last run ended, not the gap between two requests: while a run holds the
        loop, the requests that come meanwhile are read only after it, so counted from the previous
        request every gap is longer than a run and every request looks lone: the rule confirmed itself
        (16 gRPC users on a GPU served one at a time, never batched). Counted from the end of the last
        run, a request that waited through it comes within the loop's own work between two requests,
        shorter than the run; it goes to the thread, the loop reads the others meanwhile, and they batch.
        A run on the loop under load undoes itself instead of confirming itself. (Where the loop's own
        work between two requests takes longer than the run, requests stay lone under load: the runs
        are then the lesser part of the loop's time, and batching them would save little.)
        One user whose next request comes sooner after an answer than a run takes looks the same. For
        it, a run on the thread that no other request came during (the loop was free to read them) grants
        LONE_CREDIT runs on the loop, together no longer than LONE_CREDIT_NS (each run spends its recent
        time, at least LONE_CREDIT_MIN_NS); any request that finds company ends the credit. Only runs on the thread grant it, so it too
        cannot confirm itself: under load at most LONE_CREDIT requests, and at most LONE_CREDIT_NS of
        runs, go one at a time before a run on the thread lets the others in (a CPU model's runs of
        10 ms get 3 runs of credit, not 16 runs holding the loop for 160 ms).
        """
        run_ns = self._run_ns.get(rows, float("inf"))
        if queued and run_ns < self._inline_ns:
            return True
        if requests > 1 or self._busy or self._queue.items or run_ns >= self._idle_inline_ns:
            return False
        if arrived_ns - self._idle_since_ns > run_ns:
            return True
        spend = max(run_ns, LONE_CREDIT_MIN_NS)
        if self._lone_credit_ns >= spend:
            self._lone_credit_ns -= spend
            return True
        return False

    def _ran(self) -> None:
        """A run ended: one batch fewer running; when none is left, the batcher is idle from now (_on_loop)."""
        self._busy -= 1
        if self._busy == 0:
            self._idle_since_ns = time.perf_counter_ns()

    def _worth_waiting(self, rows: int, rows_per_request: int, remaining_ns: float) -> bool:
        """Whether holding a batch of `rows` rows for company is likely to pay: only while another
        instance is busy (there is load) or the next preferred size (or max_batch_size) is nearly
        reached, and only when the recent arrival rate brings that size within `remaining_ns`. So a
        lone request never waits out max_queue_delay_microseconds."""
        cfg = self.config
        if not cfg.dynamic or remaining_ns <= 0 or rows >= cfg.max_batch_size:
            return False
        target = next((t for t in self._targets if t > rows), None)
        if target is None:
            return False
        nearly = (target - rows) * NEARLY_FRACTION <= target
        if not (nearly or self._busy > 0):
            return False
        arrivals = -(-(target - rows) // max(rows_per_request, 1))  # requests still needed, rounded up
        return arrivals * self._gap_ns <= remaining_ns

    def _run_direct(self, inputs: dict[str, np.ndarray], rows: int, requests: int = 1) -> dict[str, np.ndarray]:
        """One request on the loop, now, on instance 0 (every instance is idle): what _worker would do with it."""
        self._busy += 1
        try:
            (result,), input_ns, infer_ns, output_ns = self._execute(0, [_Request(inputs, rows, (), None)], rows,
                                                                     lone=True)
        except ServeError:
            raise
        except Exception as e:
            raise self._model_failed(e) from None
        finally:
            self._ran()
        self._note_run(rows, infer_ns)
        self.stats.record_execution(rows, requests, 0, input_ns, infer_ns, output_ns)
        return result

    def _model_failed(self, e: Exception) -> Internal:
        """onnxruntime's own errors: the model failed on this batch."""
        return Internal(f"onnxruntime failed on model '{self.model.name}': {e}")

    def _note_run(self, rows: int, infer_ns: int) -> None:
        """Moving average of session-run time per batch size, which picks inline vs thread runs."""
        prev = self._run_ns.get(rows)
        self._run_ns[rows] = infer_ns if prev is None else 0.8 * prev + 0.2 * infer_ns

    def _execute(self, instance: int, batch: list[_Request], rows: int, lone: bool = False):
        """One batch where it is: join inputs (compute_input), run (compute_infer), split rows back (compute_output).
        `lone`: a request run at once with every instance idle (the model's lone-run session may take it)."""
        feed, input_ns = self._join(batch, rows)
        outs, infer_ns = self._run(instance, feed, rows, lone)
        results, output_ns = self._split(batch, outs)
        return results, input_ns, infer_ns, output_ns

    def _join(self, batch: list[_Request], rows: int) -> tuple[dict[str, np.ndarray], int]:
        """The batch's inputs joined along dim 0 and padded to the model's bucket in one copy; (feed, ns)."""
        t0 = time.perf_counter_ns()
        size = self.model.bucket(rows)
        if len(batch) == 1:
            feed = batch[0].inputs
            if size != rows:
                feed = {name: pad_rows(a, size) for name, a in feed.items()}
        else:
            feed = {}
            for name, a in batch[0].inputs.items():
                joined = np.empty((size, *a.shape[1:]), dtype=a.dtype)
                pos = 0
                for r in batch:
                    part = r.inputs[name]
                    joined[pos:pos + part.shape[0]] = part
                    pos += part.shape[0]
                if pos < size:
                    joined[pos:] = 0
                feed[name] = joined
        return feed, time.perf_counter_ns() - t0

    def _run(self, instance: int, feed: dict[str, np.ndarray], rows: int, lone: bool = False
             ) -> tuple[list[np.ndarray], int]:
        """session.run of a joined, padded batch (on the instance's thread, or the loop); (outputs, ns)."""
        t0 = time.perf_counter_ns()
        outs = (self.model.run(instance, feed, self.model.output_names, rows, lone=True) if lone
                else self.model.run(instance, feed, self.model.output_names, rows))
        return outs, time.perf_counter_ns() - t0

    def _split(self, batch: list[_Request], outs: list[np.ndarray]) -> tuple[list[dict[str, np.ndarray]], int]:
        """Each request's rows of the outputs (views, no copies); (results, ns)."""
        t0 = time.perf_counter_ns()
        names = self.model.output_names
        if len(batch) == 1:
            results = [dict(zip(names, outs))]
        else:
            results, offset = [], 0
            for r in batch:
                results.append({n: o[offset : offset + r.rows] for n, o in zip(names, outs)})
                offset += r.rows
        return results, time.perf_counter_ns() - t0
