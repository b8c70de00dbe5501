"""Locust users that send inference requests with tritonclient: closed loop (HTTP, gRPC) and open loop.

`TritonUser` is the one abstract user: it prepares the request once (`on_start`), times each call
with `time.perf_counter` and fires `events.request` itself, with a readable failure message. The
concrete closed-loop users only pick a protocol and run `closed_loop`, which sends back to back
within one task run (Locust's per-task bookkeeping would otherwise cost a fifth of the process's
CPU per request) and returns when Locust asks the user to stop. `OpenLoopUser` sends at Poisson
arrival times instead of back to back, and counts each request's latency from its scheduled send
time, so a stalled server shows its whole queue in the latencies instead of slowing the load down
(no coordinated omission).
"""

from __future__ import annotations

import logging
import random
import time
from typing import Any

import gevent
import gevent.lock
import gevent.pool
from locust import User, constant, task
from locust.exception import StopUser
from locust.user.users import LOCUST_STATE_STOPPING

from trainserve.loadtest.clients import GrpcInfer, HttpInfer
from trainserve.loadtest.model_info import ModelInfo, Validator, build_arrays, describe_error, fetch_model_info
from trainserve.loadtest.options import LoadOptions

log = logging.getLogger(__name__)


class InferenceFailure(Exception):
    """A failed request, with the server's status and message as its text."""


def _request_type(protocol: str) -> str:
    return "HTTP" if protocol == "http" else "gRPC"


class _Prepared:
    """What every user of one process shares: the model's metadata, the request arrays, the validator."""

    _cache: dict[tuple[Any, ...], _Prepared] = {}
    _lock = gevent.lock.Semaphore()

    def __init__(self, opts: LoadOptions, protocol: str) -> None:
        self.info: ModelInfo = fetch_model_info(opts.server_url, opts.model_name, protocol)
        self.arrays = build_arrays(self.info, opts.batch_size, opts.input_data)
        self.validator = (Validator(self.info, opts.batch_size, opts.validate, opts.expected_output)
                          if opts.validate != "off" else None)

    @classmethod
    def get(cls, opts: LoadOptions, protocol: str) -> _Prepared:
        key = (opts.server_url, opts.model_name, protocol, opts.batch_size, opts.input_data, opts.validate,
               opts.expected_output)
        with cls._lock:  # the first user fetches, the others wait and reuse
            if key not in cls._cache:
                cls._cache[key] = cls(opts, protocol)
            return cls._cache[key]


class TritonUser(User):
    """Abstract user; the closed-loop users run `closed_loop` (one request at a time, back to back).

    No @task here: Locust gives a subclass its bases' tasks too, so OpenLoopUser would also run them.
    """

    abstract = True
    protocol: str = "http"
    wait_time = constant(0)

    def concurrency(self) -> int:
        """Connections this user may use at once."""
        return 1

    def on_start(self) -> None:
        self._fire = self.environment.events.request.fire
        self.setup_failed = False
        try:
            self.opts = LoadOptions.from_parsed(self.environment.parsed_options)
        except ValueError as e:  # a bad option: one failure, then this user stops (in its task)
            self._setup_failure(self.protocol, "setup", str(e))
            return
        protocol = self.protocol_in_use()
        self.name = f"{self.opts.model_name} b{self.opts.batch_size}"
        try:
            prepared = _Prepared.get(self.opts, protocol)
        except Exception as e:  # server down, unknown model: one failure, then this user stops
            self._setup_failure(protocol, "setup", describe_error(e))
            return
        self.request_type = _request_type(protocol)
        self.validator = prepared.validator
        want = self.validator is not None
        if protocol == "grpc":
            self.infer: HttpInfer | GrpcInfer = GrpcInfer(self.opts.server_url, prepared.info, prepared.arrays,
                                                          want_outputs=want)
        else:
            self.infer = HttpInfer(self.opts.server_url, prepared.info, prepared.arrays,
                                   concurrency=self.concurrency(), mode=self.opts.http_client, want_outputs=want)

    def _setup_failure(self, protocol: str, name: str, message: str) -> None:
        # Reported as one failed request; the user's task then stops it quietly. Raising StopUser
        # here would make Locust log a traceback for every user.
        self.setup_failed = True
        self.request_type = _request_type(protocol)
        self._fire(request_type=self.request_type, name=name, response_time=0.0, response_length=0,
                   exception=InferenceFailure(message), context={})

    def protocol_in_use(self) -> str:
        return self.protocol

    def on_stop(self) -> None:
        infer = getattr(self, "infer", None)
        if infer is not None:
            infer.close()

    def closed_loop(self) -> None:
        """The closed-loop users' task: requests back to back until Locust stops the user."""
        # Back to back inside one task run: Locust's per-task bookkeeping (task pick, wait_time,
        # sleep(0), state changes) would cost about a fifth of the process's CPU per request.
        # Stops as a task would: after the request in progress once Locust asks the user to stop
        # (a forced stop kills the greenlet, as it kills a task).
        if self.setup_failed:
            raise StopUser()
        timed_call, clock = self.timed_call, time.perf_counter
        n = 0
        while self._state != LOCUST_STATE_STOPPING:
            timed_call(clock())
            n += 1
            if not n & 63:  # yield now and then, in case answers are always ready without waiting
                gevent.sleep(0)

    def timed_call(self, start: float, context: dict[str, Any] | None = None) -> None:
        """Send one request; its latency counts from `start` (a perf_counter time, s)."""
        exception = None
        length = 0
        try:
            length, outputs = self.infer.call()
            if self.validator is not None:
                problem = self.validator.check(outputs or {})
                if problem:
                    exception = InferenceFailure(f"invalid response: {problem}")
        except gevent.GreenletExit:
            raise
        except Exception as e:
            exception = InferenceFailure(describe_error(e))
        self._fire(request_type=self.request_type, name=self.name,
                   response_time=(time.perf_counter() - start) * 1000.0,  # ms, float
                   response_length=length, exception=exception, context=context or {})


class TritonHttpUser(TritonUser):
    """Closed loop over HTTP/REST with binary tensors."""

    protocol = "http"
    tasks = [TritonUser.closed_loop]


class TritonGrpcUser(TritonUser):
    """Closed loop over gRPC (grpc's gevent support is switched on by the locustfile)."""

    protocol = "grpc"
    tasks = [TritonUser.closed_loop]


class OpenLoopUser(TritonUser):
    """Open loop: Poisson arrivals at rate/open_loop_users per user, latency from the scheduled time.

    The scheduler draws exponential gaps and spawns one greenlet per request, up to max_in_flight at
    once; beyond that the next send waits, but its latency still counts from when it was due.
    """

    def protocol_in_use(self) -> str:
        return self.opts.protocol

    def concurrency(self) -> int:
        return self.opts.max_in_flight

    def current_rate(self) -> float:
        """Arrivals/s for this user: its share of --rate, or of the rate a search shape set (0: paused)."""
        shared = getattr(self.environment, "trainserve", None)
        rate = shared.rate if shared is not None and shared.rate is not None else self.opts.rate
        return rate / self.opts.open_loop_users

    @task
    def infer_once(self) -> None:  # runs until the user is stopped
        if self.setup_failed:
            raise StopUser()
        self._pool = gevent.pool.Pool(self.opts.max_in_flight)
        rng = random.Random()
        clock = time.perf_counter
        to_wall = time.time() - clock()  # the due time in wall-clock seconds, for the collector's windows
        shared = getattr(self.environment, "trainserve", None)
        scheduled = getattr(shared, "on_scheduled", None)
        due = clock()
        while True:
            if getattr(shared, "closed_users", 0) > 0:  # the search's closed-loop probe
                self._closed_probe(shared, scheduled, to_wall)
                due = clock()
                continue
            rate = self.current_rate()
            if rate <= 0:  # paused by a search shape between rates
                gevent.sleep(0.05)
                due = clock()
                continue
            due += rng.expovariate(rate)
            # a long gap is slept in steps, so a new rate takes effect at once; the gaps are memoryless,
            # so drawing the next one afresh from now keeps the arrivals Poisson
            while due - clock() > 0.2 and self.current_rate() == rate:
                gevent.sleep(0.2)
            if self.current_rate() != rate:
                due = clock()
                continue
            delay = due - clock()
            if delay > 0:
                gevent.sleep(delay)
            if scheduled is not None:
                scheduled(due + to_wall)
            self._pool.spawn(self.timed_call, due, {"due_wall": due + to_wall})

    def _closed_probe(self, shared: Any, scheduled: Any, to_wall: float) -> None:
        """Back to back from `shared.closed_users` greenlets until the search ends its closed-loop probe: how
        much the server answers when it is never idle (the estimate the search's first rate comes from)."""
        clock = time.perf_counter

        def sender() -> None:
            while shared.closed_users > 0:
                start = clock()
                if scheduled is not None:
                    scheduled(start + to_wall)
                self.timed_call(start, {"due_wall": start + to_wall})

        gevent.joinall([self._pool.spawn(sender) for _ in range(min(shared.closed_users, self.opts.max_in_flight))])

    def on_stop(self) -> None:
        pool = getattr(self, "_pool", None)
        if pool is not None:
            # Wait for the killed requests to unwind: a gRPC channel closed under a call that
            # is still being torn down hangs the process at exit.
            pool.kill(block=True, timeout=2.0)
        super().on_stop()
