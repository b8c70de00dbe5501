"""The load test's own settings: Locust command-line arguments that also appear in the web UI form.

`register(parser)` adds them (events.init_command_line_parser); `LoadOptions.from_parsed(options)`
turns Locust's parsed options (which the master also sends to its workers) into a typed, validated
config that users and shapes read.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

PROTOCOLS = ("http", "grpc")
VALIDATIONS = ("off", "shape", "values")
HTTP_CLIENTS = ("prepared", "tritonclient")

# The start form's label of each custom field (Locust would title-case the option's name: "Slo P9 9Ms");
# the help text under each is the option's --help.
# The web form's fields in the order a person fills them, grouped: what to load, the load's shape, then the
# inputs and their checks (Locust lists them by option name otherwise: Server URL 14th of 16)
FORM_GROUPS = (
    ("What to load", ("server_url", "model_name", "protocol", "batch_size")),
    ("Load shape", ("rate", "open_loop_users", "max_in_flight", "ramp_start_users", "ramp_step_users",
                    "ramp_step_s", "ramp_max_users", "slo_p99_ms", "min_gain")),
    ("Inputs and checks", ("input_data", "validate", "expected_output")),
)
FORM_LABELS = {
    "server_url": "Server URL",
    "model_name": "Model name",
    "protocol": "Protocol (load shapes, open loop)",
    "batch_size": "Batch size",
    "rate": "Arrival rate (requests/s)",
    "open_loop_users": "Open-loop schedulers",
    "max_in_flight": "Most requests in flight per scheduler",
    "ramp_start_users": "Ramp: users in the first step",
    "ramp_step_users": "Ramp: users added per step",
    "ramp_step_s": "Ramp: step length (s)",
    "ramp_max_users": "Ramp: most users",
    "slo_p99_ms": "SLO p99 (ms)",
    "min_gain": "Ramp: least throughput gain per step",
    "warmup_s": "Warm-up, not counted (s)",
    "window_s": "Measurement window (s)",
    "search_budget_s": "Server search: time budget (s)",
    "search_probe_s": "Server search: most seconds per rate",
    "input_data": "Input data",
    "validate": "Validate responses",
    "expected_output": "Expected outputs (.npz)",
}
# The form's help where the command line's names other options by their flags: said in words
FORM_HELP = {
    "validate": "Check each response: off, shape (its shape and data type), or values (against the expected "
                "outputs below)",
    "expected_output": "When responses are validated by value: the .npz file of the outputs recorded for the same "
                       "inputs",
    "rate": "Open loop (the PoissonRate shape or the OpenLoopUser class): arrivals per second, all users together",
    "open_loop_users": "Open loop: scheduler users sharing the arrival rate (one per worker process is enough)",
}


class OptionError(ValueError):
    """A load option out of its range; names the field, the bad value and what is allowed."""

    def __init__(self, name: str, value: Any, allowed: str) -> None:
        super().__init__(f"load option {name}={value!r} is invalid; allowed: {allowed}")
        self.name, self.value, self.allowed = name, value, allowed


def register(parser: Any) -> None:
    """Add the custom arguments to Locust's parser; `include_in_web_ui` puts them in the start form."""
    g = parser  # argument groups would drop include_in_web_ui: Locust reads it in its own add_argument
    g.add_argument("--server-url", default="127.0.0.1:8000", include_in_web_ui=True,
                   help="HOST:PORT of the server's endpoint for the chosen protocol (HTTP 8000, gRPC 8001)")
    g.add_argument("--model-name", default="", include_in_web_ui=True, is_required=True,
                   help="Served model name, e.g. cnn_cpu")
    g.add_argument("--protocol", default="http", choices=PROTOCOLS, include_in_web_ui=True,
                   help="Protocol of the load shapes and the open-loop user (the closed-loop classes name theirs)")
    g.add_argument("--batch-size", type=int, default=1, include_in_web_ui=True,
                   help="Rows per request (the model's first dimension), 1 or more")
    g.add_argument("--input-data", default="random", include_in_web_ui=True,
                   help="'random', or the path of an .npz whose arrays are named after the model inputs")
    g.add_argument("--validate", default="off", choices=VALIDATIONS, include_in_web_ui=True,
                   help="Check each response: off, shape (shape and dtype), values (against --expected-output)")
    g.add_argument("--expected-output", default="", include_in_web_ui=True,
                   help="With --validate values: .npz of the outputs recorded for the same inputs")
    g.add_argument("--rate", type=float, default=50.0, include_in_web_ui=True,
                   help="Open loop (PoissonRate shape / OpenLoopUser): arrivals per second, all users together")
    g.add_argument("--open-loop-users", type=int, default=1, include_in_web_ui=True,
                   help="Open loop: scheduler users sharing --rate (one per worker process is enough)")
    g.add_argument("--max-in-flight", type=int, default=256, include_in_web_ui=True,
                   help="Open loop: most requests outstanding per scheduler user; later ones wait (their "
                        "latency still counts from the scheduled time)")
    g.add_argument("--ramp-start-users", type=int, default=1, include_in_web_ui=True,
                   help="Step ramp: users in the first step")
    g.add_argument("--ramp-step-users", type=int, default=2, include_in_web_ui=True,
                   help="Step ramp: users added per step")
    g.add_argument("--ramp-step-s", type=float, default=10.0, include_in_web_ui=True,
                   help="Step ramp: seconds per step")
    g.add_argument("--ramp-max-users", type=int, default=64, include_in_web_ui=True,
                   help="Step ramp: stop after the step with this many users")
    g.add_argument("--slo-p99-ms", type=float, default=100.0, include_in_web_ui=True,
                   help="Step ramp: stop when a step's p99 latency exceeds this many milliseconds")
    g.add_argument("--min-gain", type=float, default=0.05, include_in_web_ui=True,
                   help="Step ramp: stop when a step adds less than this fraction of throughput (0.05 means 5 percent)")
    g.add_argument("--warmup-s", type=float, default=0.0, include_in_web_ui=True,
                   help="Requests that start (open loop: are due) in the first this-many seconds are not counted")
    g.add_argument("--window-s", type=float, default=1.0, include_in_web_ui=True,
                   help="Measurement window: a figure is stable when 3 consecutive windows agree within 10 percent")
    g.add_argument("--search-budget-s", type=float, default=30.0, include_in_web_ui=True,
                   help="ServerSearch shape: seconds the capacity search may take in all")
    g.add_argument("--search-probe-s", type=float, default=4.0, include_in_web_ui=True,
                   help="ServerSearch shape: most seconds of windows per rate tried (after its warm-up)")
    g.add_argument("--http-client", default="prepared", choices=HTTP_CLIENTS, include_in_web_ui=False,
                   help="HTTP path: 'prepared' posts a request body built once by tritonclient; "
                        "'tritonclient' calls InferenceServerClient.infer each time")
    g.add_argument("--abort-after-s", type=float, default=3.0, include_in_web_ui=False,
                   help="Stop the test when only failures were seen for this long (0 = never)")
    g.add_argument("--results-json", default="", include_in_web_ui=False,
                   help="Write sub-millisecond percentiles, ramp steps and errors here at the end")


@dataclass
class LoadOptions:
    """Validated custom settings of one load test (see `register` for each field's meaning)."""

    server_url: str
    model_name: str
    protocol: str = "http"
    batch_size: int = 1
    input_data: str = "random"
    validate: str = "off"
    expected_output: str = ""
    rate: float = 50.0
    open_loop_users: int = 1
    max_in_flight: int = 256
    ramp_start_users: int = 1
    ramp_step_users: int = 2
    ramp_step_s: float = 10.0
    ramp_max_users: int = 64
    slo_p99_ms: float = 100.0
    min_gain: float = 0.05
    warmup_s: float = 0.0
    window_s: float = 1.0
    search_budget_s: float = 30.0
    search_probe_s: float = 4.0
    http_client: str = "prepared"
    abort_after_s: float = 3.0
    results_json: str = ""

    def __post_init__(self) -> None:
        self.server_url = strip_scheme(self.server_url)
        checks = [
            ("server_url", ":" in self.server_url, "HOST:PORT"),
            ("model_name", bool(self.model_name), "a served model's name"),
            ("protocol", self.protocol in PROTOCOLS, " or ".join(PROTOCOLS)),
            ("batch_size", self.batch_size >= 1, ">= 1"),
            ("validate", self.validate in VALIDATIONS, ", ".join(VALIDATIONS)),
            ("expected_output", self.validate != "values" or bool(self.expected_output),
             "an .npz path when validate is 'values'"),
            ("rate", self.rate > 0, "> 0 per second"),
            ("open_loop_users", self.open_loop_users >= 1, ">= 1"),
            ("max_in_flight", self.max_in_flight >= 1, ">= 1"),
            ("ramp_start_users", self.ramp_start_users >= 1, ">= 1"),
            ("ramp_step_users", self.ramp_step_users >= 1, ">= 1"),
            ("ramp_step_s", self.ramp_step_s > 0, "> 0 s"),
            ("ramp_max_users", self.ramp_max_users >= self.ramp_start_users, ">= ramp_start_users"),
            ("slo_p99_ms", self.slo_p99_ms > 0, "> 0 ms"),
            ("min_gain", 0 <= self.min_gain < 1, "0 <= x < 1"),
            ("warmup_s", self.warmup_s >= 0, ">= 0 s"),
            ("window_s", self.window_s > 0, "> 0 s"),
            ("search_budget_s", self.search_budget_s > 0, "> 0 s"),
            ("search_probe_s", self.search_probe_s >= 3 * self.window_s, ">= 3 windows (3 x window_s)"),
            ("http_client", self.http_client in HTTP_CLIENTS, ", ".join(HTTP_CLIENTS)),
            ("abort_after_s", self.abort_after_s >= 0, ">= 0 s"),
        ]
        for name, ok, allowed in checks:
            if not ok:
                raise OptionError(name, getattr(self, name), allowed)

    @classmethod
    def from_parsed(cls, parsed: Any) -> LoadOptions:
        """From Locust's parsed options (argparse Namespace), ignoring Locust's own arguments."""
        names = cls.__dataclass_fields__.keys()
        return cls(**{n: getattr(parsed, n) for n in names if hasattr(parsed, n)})


def protocol_of(server_url: str, protocol: str = "http") -> str:
    """The protocol a server URL suggests: its scheme (grpc://), else the gRPC port 8001, else `protocol`."""
    if server_url.startswith("grpc://"):
        return "grpc"
    if server_url.startswith(("http://", "https://")):
        return "http"
    return "grpc" if strip_scheme(server_url).endswith(":8001") else protocol


def strip_scheme(url: str) -> str:
    """'http://h:p/' -> 'h:p' (tritonclient wants HOST:PORT)."""
    for prefix in ("http://", "https://", "grpc://"):
        if url.startswith(prefix):
            url = url[len(prefix):]
    return url.rstrip("/")
