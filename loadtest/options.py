"""The load test's own settings: Locust command-line arguments that also appear in the web UI form.

Each is a field of LocustOptions (trainserve/core/options/load.py), which holds its default, help and
form label. `register(parser)` adds them (events.init_command_line_parser); `LoadOptions.from_parsed(options)`
turns Locust's parsed options (which the master also sends to its workers) into a typed, validated
config that users and shapes read.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from trainserve.core.options.load import FORM_GROUPS, LOAD_SHAPES, LocustOptions
from trainserve.core.options.spec import REQUIRED, options

__all__ = ["FORM_GROUPS", "LoadOptions", "OptionError", "register"]

# The web form: each custom field's label and help, from the tree (Locust would title-case the option's name:
# "Slo P9 9Ms")
_WEB = [o for o in options(LocustOptions) if o.meta.web]
FORM_LABELS = {o.name: o.meta.label for o in _WEB}
# the form's help where the command line's names other options by their flags: said in words
FORM_HELP = {o.name: o.meta.web_help for o in _WEB if o.meta.web_help}


class OptionError(ValueError):
    """A load option out of its range; names the field, the bad value and what is allowed."""

    def __init__(self, name: str, value: Any, allowed: str) -> None:
        super().__init__(f"load option {name}={value!r} is invalid; allowed: {allowed}")
        self.name, self.value, self.allowed = name, value, allowed


def register(parser: Any) -> None:
    """Add LocustOptions to Locust's parser; `include_in_web_ui` puts the `web` ones in the start form."""
    for o in options(LocustOptions):
        kind = type(o.default) if isinstance(o.default, (int, float)) and not isinstance(o.default, bool) else None
        extra: dict[str, Any] = {"type": kind} if kind is not None else {}
        if o.meta.choices:
            extra["choices"] = o.meta.choices
        if o.meta.required:  # the form asks for it; the command line may still leave it to the form
            extra["is_required"] = True
        # argument groups would drop include_in_web_ui: Locust reads it in its own add_argument
        parser.add_argument(*o.names, default=o.default if o.default is not REQUIRED else "",
                            include_in_web_ui=o.meta.web, help=o.meta.help.rstrip("."), **extra)


@dataclass(kw_only=True)
class LoadOptions(LocustOptions):
    """Validated custom settings of one load test: LocustOptions (trainserve/core/options/load.py: each
    field's default and meaning) plus the checks that name the bad one."""

    def __post_init__(self) -> None:
        self.server_url = strip_scheme(self.server_url)
        shared = [(name, ok, allowed) for name, _, ok, allowed in self.shared_checks()]
        checks = [
            ("server_url", ":" in self.server_url, "HOST:PORT"),
            ("model_name", bool(self.model_name), "a served model's name"),
            ("batch_size", self.batch_size >= 1, ">= 1"),
            ("expected_output", self.validate != "values" or bool(self.expected_output),
             "an .npz path when validate is 'values'"),
            ("rate", self.rate > 0, "> 0 per second"),
            ("open_loop_users", self.open_loop_users >= 1, ">= 1"),
            ("max_in_flight", self.max_in_flight >= 1, ">= 1"),
            ("ramp_start_users", self.ramp_start_users >= 1, ">= 1"),
            ("ramp_step_users", self.ramp_step_users >= 1, ">= 1"),
            *shared,
            ("ramp_max_users", self.ramp_max_users >= self.ramp_start_users, ">= ramp_start_users"),
            ("min_gain", 0 <= self.min_gain < 1, "0 <= x < 1"),
            ("warmup_s", self.warmup_s >= 0, ">= 0 s"),
            ("search_budget_s", self.search_budget_s > 0, "> 0 s"),
            ("search_closed_users", 0 <= self.search_closed_users <= self.max_in_flight, "0 to max_in_flight"),
            ("abort_after_s", self.abort_after_s >= 0, ">= 0 s"),
            ("load_shape", self.load_shape in LOAD_SHAPES, ", ".join(LOAD_SHAPES)),
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
