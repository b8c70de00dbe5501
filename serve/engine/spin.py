"""Busy-polling an event loop between requests: the mechanism, and when a multi-front-end server uses it.

A thread the kernel wakes from epoll_wait adds tens to hundreds of microseconds to a batch-1 request
(more on a VM), and a request through a front-end process (serve/engine/model_process.py) pays up to three such
wake-ups where the single-process server pays one: the front end woken by the client, the model
process by the front end, the front end by the answer. A loop that keeps a callback in its ready
queue polls its sockets with a zero timeout instead of sleeping, so a message that comes meanwhile is
read at once; the price is a core kept busy for the window.

So polling is bounded in time and limited to hosts with cores to spare (never a 2-core machine):

- a front end polls while its one request in flight waits for the model process (at most
  `wait_us`), and for `after_us` after the answer that left it with none in flight (the client's
  next request), stopping when a request goes to a CPU model's process;
- the model process polls for `after_us` after an answer that left its batchers idle, however long
  the run took (ServerCore stops polling while a batch runs on a thread).

Under load (other requests in flight) nobody polls: the loops have work, and processes polling all
the time would look CPU-bound to the served figures' attribution (trainserve/core/served.py).

`TRAINSERVE_SERVE_SPIN` chooses: unset or `0`, never (the default until the polling is measured on a
many-core GPU host: benchmarks/gpu_session.sh perf23); `auto`, from the cores (`plan`); `1`, always,
even on a small host (for measurements); `2`, as 1, and a front end polls for answers whatever the
number of its requests in flight (a measured variant).

The server's processes run with a GIL switch interval of SWITCH_US (`switch_interval`) instead of
Python's 5000 us: an instance thread whose session run has ended (onnxruntime runs without the GIL)
waits for the GIL while the event loop parses requests, up to the switch interval when the loop makes no
system call meanwhile. Under load the loop is always busy, so every run paid up to 5 ms: a CUDA run of
0.6 ms took 3 ms served (docs/BENCHMARKS.md). `TRAINSERVE_SERVE_SWITCH_US` sets another interval
(5000: Python's own).
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

from trainserve.core import envs

ENV = envs.SERVE_SPIN.name
SWITCH_ENV = envs.SERVE_SWITCH_US.name
SWITCH_US = 100  # the server's GIL switch interval, microseconds (Python's: 5000); see the module docstring
AFTER_US = 1000  # poll this long after an answer, microseconds (--busy-poll-us's default)
WAIT_US = 3000  # a front end polls at most this long for the model process's answer, microseconds
SPARE_CORES_PER_POLLER = 2  # polling is on with at least this many usable cores per polling process


@dataclass(frozen=True)
class SpinPlan:
    """How long each side of a multi-front-end server polls instead of sleeping, microseconds (0 = never)."""

    after_us: int = 0  # after an answer: front ends and the model process
    wait_us: int = 0  # a front end, while its one request in flight waits for the answer
    any_in_flight: bool = False  # ... and while several do (TRAINSERVE_SERVE_SPIN=2)

    @property
    def on(self) -> bool:
        return bool(self.after_us or self.wait_us)

    def describe(self) -> str:
        which = "any" if self.any_in_flight else "lone"
        return f"busy-poll {self.after_us}/{self.wait_us} us (after/{which})" if self.on else "no busy-polling"


def plan(frontends: int, device: str, cores: int | None = None, setting: str | None = None,
         busy_poll_us: int = AFTER_US) -> SpinPlan:
    """The polling of a server with `frontends` front-end processes on `device`, given the usable cores and
    the server's --busy-poll-us (the window after an answer; 0 turns the polling off, as it does ServerCore's).

    Off unless `setting` (TRAINSERVE_SERVE_SPIN) asks for it. Auto: on with at least SPARE_CORES_PER_POLLER cores per process that polls (the front ends and
    the model process): the default front-end count, a quarter of the cores, always has them; a
    2-core host never does. A front end waiting for a CPU model's answer does not poll: the
    session's intra-op threads use every core while it runs.
    """
    setting = envs.SERVE_SPIN.get() if setting is None else setting
    if setting.strip() != "auto" and setting.strip() not in ("1", "2"):
        return SpinPlan()  # unset, 0 or anything else: off (on 16 cores it cost 27% at 128 gRPC users)
    if setting.strip() in ("1", "2"):
        return SpinPlan(AFTER_US, WAIT_US, setting.strip() == "2")
    cores = len(os.sched_getaffinity(0)) if cores is None else cores
    if frontends < 2 or busy_poll_us <= 0 or cores < SPARE_CORES_PER_POLLER * (frontends + 1):
        return SpinPlan()
    return SpinPlan(busy_poll_us, 0 if device == "cpu" else WAIT_US)


class Poller:
    """Keeps the running loop polling (a callback always ready) until a deadline, or until `busy()` says stop."""

    def __init__(self, busy: Callable[[], bool] = lambda: False) -> None:
        self._busy = busy
        self._until = 0  # perf_counter_ns until which the loop keeps polling
        self._polling = False
        self._loop: asyncio.AbstractEventLoop | None = None

    def extend(self, window_ns: int) -> None:
        """Poll until at least `window_ns` from now (on the running loop)."""
        if window_ns <= 0:
            return
        until = time.perf_counter_ns() + window_ns
        if until > self._until:
            self._until = until
        if not self._polling:
            self._polling = True
            if self._loop is None:
                self._loop = asyncio.get_running_loop()
            self._loop.call_soon(self._poll)

    def stop(self) -> None:
        """No more polling after the current turn."""
        self._until = 0

    @property
    def polling(self) -> bool:
        return self._polling

    def _poll(self) -> None:
        if time.perf_counter_ns() < self._until and not self._busy():
            self._loop.call_soon(self._poll)
        else:
            self._polling = False


def switch_interval(setting: str | None = None) -> float:
    """Set the GIL switch interval: TRAINSERVE_SERVE_SWITCH_US (microseconds, 50..100000) when it is set,
    else SWITCH_US; the interval in force, s. A value out of range: ValueError naming it."""
    setting = envs.SERVE_SWITCH_US.get() if setting is None else setting
    if not setting.strip():
        setting = str(SWITCH_US)
    try:
        us = int(setting)
    except ValueError:
        us = -1
    if not 50 <= us <= 100_000:
        raise ValueError(f"{SWITCH_ENV}={setting!r} must be a whole number of microseconds in 50..100000")
    sys.setswitchinterval(us / 1e6)
    return sys.getswitchinterval()
