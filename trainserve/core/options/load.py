"""`trainserve load` (LoadJob) and Locust's own arguments and web form (LocustOptions).

Two latencies, two names: `ramp_stop_p99_ms` is when the closed-loop ramp stops stepping up users;
`slo_p99_ms` (cost.SloOptions) is the budget the Server scenario's search must meet.
LoadConfig (loadtest/runner.py) is LoadJob plus its checks; LoadOptions (loadtest/options.py) is
LocustOptions plus its checks.
"""

from __future__ import annotations

from dataclasses import dataclass

from trainserve.core.options.common import RunsDir
from trainserve.core.options.cost import SloOptions
from trainserve.core.options.spec import like, opt

PROTOCOLS = ("http", "grpc")
VALIDATIONS = ("off", "shape", "values")
HTTP_CLIENTS = ("prepared", "tritonclient")
LOAD_SHAPES = ("PoissonRate", "ServerSearch", "StepRamp", "none")  # loadtest/locustfile.py's _SHAPES
# Locust's web form: its groups of fields in the order a person fills them (what to load, the load's shape,
# then the inputs and their checks); Locust lists them by option name otherwise (Server URL 14th of 16)
FORM_GROUPS = (
    ("What to load", ("server_url", "model_name", "protocol", "batch_size")),
    ("Load shape", ("rate", "open_loop_users", "max_in_flight", "ramp_start_users", "ramp_step_users", "ramp_step_s",
                    "ramp_max_users", "ramp_stop_p99_ms", "min_gain", "slo_p99_ms")),
    ("Inputs and checks", ("input_data", "validate", "expected_output")),
)


@dataclass(kw_only=True)
class Shared(SloOptions):
    """Settings `trainserve load` hands to Locust unchanged."""

    protocol: str = opt("http", "http (binary tensors) or grpc; in Locust, the protocol of the load shapes and the "
                                "open-loop user (its closed-loop user classes name theirs).", choices=PROTOCOLS, web=True,
                        label="Protocol (load shapes, open loop)")
    ramp_step_s: float = opt(10.0, "Step ramp: seconds per step.", unit="s", web=True,
                             label="Ramp: step length (s)")
    ramp_max_users: int = opt(64, "Step ramp: stop after the step with this many users.", unit="users", web=True, label="Ramp: most users")
    ramp_stop_p99_ms: float = opt(SloOptions.slo_p99_ms, "Step ramp: stop when a step's p99 latency exceeds this "
                                                         "(a stopping rule; the cost's budget is --slo-p99-ms).",
                                  unit="ms", web=True, label="Ramp: stop at p99 (ms)",
                                  web_help="Step ramp: stop when a step's p99 latency exceeds this many milliseconds")
    window_s: float = opt(1.0, "Measurement window: a figure is stable when 3 consecutive windows agree within 10 "
                               "percent.", unit="s", web=True, label="Measurement window (s)")
    search_probe_s: float = opt(4.0, "Server search: most seconds of windows per rate tried (after its warm-up).",
                                unit="s", web=True, label="Server search: most seconds per rate")
    input_data: str = opt("random", "'random', or the path of an .npz whose arrays are named after the model "
                                    "inputs.", web=True, label="Input data")
    validate: str = opt("off", "Check each response: off, shape (shape and dtype), values (against "
                               "--expected-output).", choices=VALIDATIONS, web=True,
                        label="Validate responses",
                        web_help="Check each response: off, shape (its shape and data type), or values (against the "
                                 "expected outputs below)")
    expected_output: str = opt("", "With --validate values: .npz of the outputs recorded for the same inputs.",
                               web=True, label="Expected outputs (.npz)",
                               web_help="When responses are validated by value: the .npz file of the outputs "
                                        "recorded for the same inputs")
    http_client: str = opt("prepared", "HTTP path: 'prepared' posts a request body built once by tritonclient; "
                                       "'tritonclient' calls InferenceServerClient.infer each time.",
                           choices=HTTP_CLIENTS)

    def shared_checks(self) -> list[tuple[str, object, bool, str]]:
        """(field, value, within range, what is allowed) of these fields: LoadConfig and LoadOptions raise
        their own error for the first one out of range."""
        return [
            ("protocol", self.protocol, self.protocol in PROTOCOLS, " or ".join(PROTOCOLS)),
            ("validate", self.validate, self.validate in VALIDATIONS, ", ".join(VALIDATIONS)),
            ("http_client", self.http_client, self.http_client in HTTP_CLIENTS, ", ".join(HTTP_CLIENTS)),
            ("slo_p99_ms", self.slo_p99_ms, self.slo_p99_ms > 0, "> 0 ms"),
            ("ramp_stop_p99_ms", self.ramp_stop_p99_ms, self.ramp_stop_p99_ms > 0, "> 0 ms"),
            ("ramp_step_s", self.ramp_step_s, self.ramp_step_s > 0, "> 0 s"),
            ("ramp_max_users", self.ramp_max_users, self.ramp_max_users >= 1, ">= 1"),
            ("window_s", self.window_s, self.window_s > 0, "> 0 s"),
            ("search_probe_s", self.search_probe_s, self.search_probe_s >= 3 * self.window_s,
             ">= 3 windows (3 x window_s)"),
        ]


@dataclass(kw_only=True)
class LocustOptions(Shared):
    """Locust's custom command-line arguments; those with `web` are also fields of the web UI's start form."""

    server_url: str = opt("127.0.0.1:8000", "HOST:PORT of the server's endpoint for the chosen protocol (HTTP "
                                            "8000, gRPC 8001).", web=True, label="Server URL")
    model_name: str = opt("", "Served model name, e.g. cnn_cpu.", web=True, label="Model name",
                          required=True)
    batch_size: int = opt(1, "Rows per request (the model's first dimension), 1 or more.", unit="rows", web=True, label="Batch size")
    rate: float = opt(50.0, "Open loop (PoissonRate shape / OpenLoopUser): arrivals per second, all users "
                            "together.", unit="requests/s", web=True, label="Arrival rate (requests/s)",
                      web_help="Open loop (the PoissonRate shape or the OpenLoopUser class): arrivals per second, "
                               "all users together")
    open_loop_users: int = opt(1, "Open loop: scheduler users sharing --rate (one per worker process is enough).",
                               web=True, label="Open-loop schedulers",
                               web_help="Open loop: scheduler users sharing the arrival rate (one per worker process "
                                        "is enough)")
    max_in_flight: int = opt(256, "Open loop: most requests outstanding per scheduler user; later ones wait (their "
                                  "latency still counts from the scheduled time).", unit="requests", web=True, label="Most requests in flight per scheduler")
    ramp_start_users: int = opt(1, "Step ramp: users in the first step.", unit="users", web=True,
                                label="Ramp: users in the first step")
    ramp_step_users: int = opt(2, "Step ramp: users added per step.", unit="users", web=True,
                               label="Ramp: users added per step")
    min_gain: float = opt(0.05, "Step ramp: stop when a step adds less than this fraction of throughput (0.05 means "
                                "5 percent).", web=True, label="Ramp: least throughput gain per step")
    warmup_s: float = opt(0.0, "Requests that start (open loop: are due) in the first this-many seconds are not "
                               "counted.", unit="s", web=True, label="Warm-up, not counted (s)")
    search_budget_s: float = opt(60.0, "ServerSearch shape: seconds the capacity search may take in all.", unit="s",
                                 web=True, label="Server search: time budget (s)")
    search_closed_users: int = opt(0, "ServerSearch shape: first a closed-loop probe, this many users per open-loop "
                                      "user sending back to back; 0.9 of what the server answers is the first rate "
                                      "(0: no probe, the first rate is --rate).", unit="users")
    abort_after_s: float = opt(3.0, "Stop the test when only failures were seen for this long (0 = never).",
                               unit="s")
    results_json: str = opt("", "Write sub-millisecond percentiles, ramp steps and errors here at the end.")
    load_shape: str = opt("none", "Without the class picker: the load shape to run (none: plain users).",
                          choices=LOAD_SHAPES)


@dataclass(kw_only=True)
class LoadJob(Shared, RunsDir):
    """`trainserve load`: one headless load test, its mode, and where its record goes."""

    url: str = like(LocustOptions, "server_url", flags=("--url",), required=True)
    model: str = like(LocustOptions, "model_name", flags=("--model",))
    users: int | None = opt(None, "Closed loop: concurrent users (default 1).", unit="users")
    rate: float | None = opt(None, "Open loop: Poisson arrivals per second (with --search: the first rate tried, "
                                   "doubled or halved; without it, 0.9 of what a 4 s closed-loop probe at 16 users "
                                   "per Locust process answered, then steps of x1.25).", unit="requests/s")
    duration_s: float | None = opt(None, "Run time, e.g. 30s, 2m or 1h30m; default 30 s (with --ramp: the upper "
                                         "bound). With --search its budget, default 60 s: from the closed-loop "
                                         "estimate 5 to 6 rates of about 5 s each bracket capacity within 5% (0.9x "
                                         "passes, 1.125x fails, three bisections; 8 when the estimate is 2x off), "
                                         "30 to 45 s with the probe; doubling from 100 req/s would need 9 rates to "
                                         "pass 25,000 req/s.",
                                   unit="s", flags=("--duration",), cli_type=str)
    batch: int = like(LocustOptions, "batch_size", flags=("--batch",))
    processes: int = opt(0, "Locust processes on this machine (master + workers); 0: enough for the target within "
                            "the free cores.")
    ramp: bool = opt(False, "Step users up until a step's p99 exceeds --ramp-stop-p99-ms or throughput stops "
                            "growing.")
    search: bool = opt(False, "Server scenario: search the highest Poisson rate whose p99 (from the scheduled send "
                              "time) meets --slo-p99-ms with <= 0.1% errors.")
    warmup_s: float = opt(1.0, "Seconds after the first request not counted (not with --ramp).", unit="s")
    repeats: int = opt(1, "Run the measurement N times; the report shows mean and 95% CI.")
    run: str = opt("default", "Run name: results go to <runs-dir>/<run>/load/.")
    target: str | None = opt(None, "Name of the result file and record (default: derived).")
    metrics_url: str | None = opt(None, "Server's Prometheus URL (default http://HOST:8002/metrics).")
    server_pid: int | None = opt(None, "The server's process id, on this machine: its own CPU, memory and (on a "
                                       "CPU server) energy are sampled during the load and go into the record "
                                       "and its bound (trainserve run passes it).")
    shared_rate_basis: str | None = opt(None, "With --rate: this load is one side of a batching on/off pair offered "
                                              "the same rate (its twin: the model with or without _nobatch); the "
                                              "text says how the rate was chosen. The report sets the pair side by "
                                              "side and keeps them out of every other figure (trainserve run "
                                              "passes it).")
