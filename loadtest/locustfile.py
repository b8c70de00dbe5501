"""Locust entry point: `locust -f loadtest/locustfile.py` (web UI with the class picker) or headless.

The web UI always has the user-class and load-shape pickers (loadtest/webui.py turns them on and
checks each start). Users (pick in the class picker, or name them on the command line):
  TritonHttpUser   closed loop over HTTP with binary tensors
  TritonGrpcUser   closed loop over gRPC
  OpenLoopUser     open loop, Poisson arrivals at --rate, latency from the scheduled send time
Shapes (class picker; headless: --load-shape NAME):
  StepRamp         users up in steps until p99 passes the ramp's stop or throughput stops growing
  PoissonRate      open loop at --rate for --run-time
  ServerSearch     open loop: the highest rate whose p99 meets --slo-p99-ms (the Server scenario)

The custom fields of the start form (server URL, model, protocol, batch, input data, validation,
rate, ramp and SLO) are the arguments in loadtest/options.py. See docs/loadtest.md.
"""

from __future__ import annotations

import atexit
import logging
import os
import sys
from pathlib import Path
from typing import Any

from locust import events  # locust first: it monkey-patches the standard library for gevent

import grpc.experimental.gevent as _grpc_gevent

# gRPC must run on gevent's loop, switched on after the monkey-patching and before any channel exists
_grpc_gevent.init_gevent()

if __package__ in (None, ""):  # run as a file by Locust: make the `loadtest` package importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from trainserve.loadtest import options as _options  # noqa: E402
from trainserve.loadtest.collector import Collector  # noqa: E402
from trainserve.loadtest import search_workers  # noqa: E402
from trainserve.loadtest.search_shape import ServerSearch  # noqa: E402
from trainserve.loadtest.shapes import PoissonRate, StepRamp  # noqa: E402
from trainserve.loadtest.users import OpenLoopUser, TritonGrpcUser, TritonHttpUser  # noqa: E402

_exit_code = 0


@events.quit.add_listener
def _remember_exit_code(exit_code: int, **_: Any) -> None:
    global _exit_code
    _exit_code = exit_code


@atexit.register
def _exit_without_teardown() -> None:
    # Results and CSVs are written by now. Closing gRPC channels while the interpreter tears down
    # under gevent can hang forever (seen: Channel.close from InferenceServerClient.__del__), so
    # leave at once with Locust's exit code.
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(_exit_code)


__all__ = ["OpenLoopUser", "PoissonRate", "ServerSearch", "StepRamp", "TritonGrpcUser", "TritonHttpUser"]
_SHAPES = {"none": None, "StepRamp": StepRamp, "PoissonRate": PoissonRate, "ServerSearch": ServerSearch}


@events.init_command_line_parser.add_listener
def _add_arguments(parser: Any) -> None:
    _options.register(parser)  # --load-shape among them: one of _SHAPES


@events.init.add_listener
def _on_init(environment: Any, runner: Any, web_ui: Any = None, **_: Any) -> None:
    environment.trainserve = Collector(environment)
    # the capacity search's messages between a master and its workers (loadtest/search_workers.py)
    environment.trainserve.fleet = search_workers.install(runner)
    if web_ui is not None:
        from trainserve.loadtest import webui  # the web UI's form and pages: not loaded by headless runs

        webui.install(environment, web_ui)
    # gevent caches the loop's clock; after the slow imports above a --run-time timer would fire early
    import gevent

    gevent.get_hub().loop.update_now()
    opts = environment.parsed_options
    # Locust would otherwise always run the first shape it finds; without the class picker the
    # shape is chosen by --load-shape (the picker's "Default" means none).
    if opts is not None and not getattr(opts, "class_picker", False):
        cls = _SHAPES[getattr(opts, "load_shape", "none")]
        shape = None
        if cls is not None:
            shape = environment.available_shape_classes.get(cls.__name__) if environment.available_shape_classes \
                else None
            shape = shape or cls()
            shape.runner = runner
        environment.shape_class = shape
