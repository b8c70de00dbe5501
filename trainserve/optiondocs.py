"""docs/options.md and compose.yaml's defaults, generated from the option trees (trainserve/core/options/) and
the environment switches (trainserve/core/envs.py).

    python -m trainserve.optiondocs          # exit 1 and say what differs when either is out of date
    python -m trainserve.optiondocs --write  # rewrite them

tests/test_options.py runs the same comparison, so a default or help text changed in a tree and not here
fails the suite.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

from trainserve.core import envs
from trainserve.core.options.commands import COMMANDS, LOCUST
from trainserve.core.options.serve import ServeOptions
from trainserve.core.options.spec import REQUIRED, Command, Option
from trainserve.core.options.train import TrainOptions

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "options.md"
COMPOSE = ROOT / "compose.yaml"
# compose.yaml's ${VAR:-default} whose default is an option's: (tree, field)
COMPOSE_DEFAULTS: dict[str, tuple[type, str]] = {
    "MODEL": (TrainOptions, "model"),
    "EPOCHS": (TrainOptions, "epochs"),
    "TRITON_HTTP_PORT": (ServeOptions, "http_port"),
    "TRITON_GRPC_PORT": (ServeOptions, "grpc_port"),
    "TRITON_METRICS_PORT": (ServeOptions, "metrics_port"),
}
_VAR = re.compile(r"\$\{(\w+):-([^}]*)\}")

HEADER = """# Options

Every option of every command, generated from the option trees in `trainserve/core/options/` by
`python -m trainserve.optiondocs --write` (tests/test_options.py fails when this file differs from them):
each option's name, default, unit and help are written there once, and `--help`, Locust's web form and
these tables are read from it. Older flags keep working and are listed after the first.

`--slo-p99-ms` is a latency budget (the cost at the SLO, the capacity plan, the Server scenario's
search); `--ramp-stop-p99-ms` is when `trainserve load --ramp` stops stepping up users.
"""


def flags_of(o: Option) -> str:
    return ", ".join(f"`{n}`" for n in o.cli_names)


def shown(value: Any) -> str:
    if value is REQUIRED:
        return "required"
    if value is None or value == () or value == "":
        return ""
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, tuple):
        return ",".join(map(str, value))
    return f"`{value:g}`" if isinstance(value, float) else f"`{value}`"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def table(spec: Command, *, web: bool = False) -> list[str]:
    head = "| option | default | unit | help |" + (" web form |" if web else "")
    lines = [head, "| --- " * (5 if web else 4) + "|"]
    for o in spec.options():
        choices = f" One of: {', '.join(o.meta.choices)}." if o.meta.choices else ""
        row = f"| {flags_of(o)} | {shown(o.default)} | {o.meta.unit} | {_cell(o.meta.help + choices)} |"
        if web:
            row += f" {o.meta.label} |" if o.meta.web else " |"
        lines.append(row)
    return lines


def options_md() -> str:
    out = [HEADER]
    for name, spec in COMMANDS.items():
        title = "trainserve" if name == "trainserve" else f"trainserve {name}"
        out += [f"## `{title}`", "", *table(spec), ""]
    out += ["## Locust (`locust -f loadtest/locustfile.py`)", "",
            "The load test's own arguments, also given by `trainserve load`; those with a label are fields of the "
            "web UI's start form.", "", *table(LOCUST, web=True), ""]
    out += ["## Environment switches", "",
            "Declared in `trainserve/core/envs.py`, the one module that reads them; each is read when it is used. "
            "Most are for measurements and launchers: what a user chooses is an option above.", "",
            *env_table(), ""]
    return "\n".join(out)


def env_table() -> list[str]:
    lines = ["| variable | type | default | what it does |", "| --- | --- | --- | --- |"]
    for s in envs.SWITCHES:
        lines.append(f"| `{s.name}` | {_cell(s.type)} | {f'`{s.default}`' if s.default else 'unset'} | {_cell(s.doc)} |")
    return lines


def compose_text(text: str) -> str:
    """compose.yaml with each mapped variable's default set to its option's."""

    def sub(m: re.Match[str]) -> str:
        if m.group(1) not in COMPOSE_DEFAULTS:
            return m.group(0)
        tree, name = COMPOSE_DEFAULTS[m.group(1)]
        return f"${{{m.group(1)}:-{tree.__dataclass_fields__[name].default}}}"

    return _VAR.sub(sub, text)


def stale() -> list[str]:
    """The generated files that differ from the trees."""
    out = []
    if not DOC.exists() or DOC.read_text() != options_md():
        out.append(str(DOC.relative_to(ROOT)))
    text = COMPOSE.read_text()
    if compose_text(text) != text:
        out.append(str(COMPOSE.relative_to(ROOT)))
    return out


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv == ["--write"]:
        DOC.write_text(options_md())
        COMPOSE.write_text(compose_text(COMPOSE.read_text()))
        return 0
    if argv:
        print("usage: python -m trainserve.optiondocs [--write]", file=sys.stderr)
        return 2
    if bad := stale():
        print(f"out of date with trainserve/core/options/: {', '.join(bad)}; run python -m trainserve.optiondocs "
              "--write", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
