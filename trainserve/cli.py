"""The `trainserve` command line: one command per stage, each a few lines over a module.

Stage modules are imported lazily inside each command, so `trainserve load` (and Locust workers)
never import torch.
"""

from __future__ import annotations

import logging
from typing import Annotated

import typer

from trainserve.commands import export as _export
from trainserve.commands import limits as _limits
from trainserve.commands import load as _load
from trainserve.commands import plan as _plan
from trainserve.commands import report as _report
from trainserve.commands import run as _run
from trainserve.commands import serve as _serve
from trainserve.commands import train as _train

app = typer.Typer(
    name="trainserve",
    help="Measure what a model costs to train and to serve, on CPU and GPU, side by side.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_show_locals=False,
)


@app.callback()
def _root(
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Log debug details.")] = False,
) -> None:
    """Measure what a model costs to train and to serve, on CPU and GPU, side by side."""
    setup_logging(logging.DEBUG if verbose else logging.INFO)


def setup_logging(level: int = logging.INFO) -> None:
    """Libraries log through `logging`; only the CLI decides where it goes (stderr, via rich)."""
    from rich.logging import RichHandler

    root = logging.getLogger()
    if any(isinstance(h, RichHandler) for h in root.handlers):
        root.setLevel(level)
        return
    handler = RichHandler(show_path=False, rich_tracebacks=False, markup=False)
    handler.setFormatter(logging.Formatter("%(message)s"))
    root.addHandler(handler)
    root.setLevel(level)
    for noisy in ("urllib3", "matplotlib", "PIL", "asyncio", "onnxscript", "onnx_ir", "torch"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


app.command("train")(_train.train)
app.command("compare")(_train.compare)
app.command("export")(_export.export)
app.command("serve")(_serve.serve)
app.command("load")(_load.load)
app.command("limits")(_limits.limits)
app.command("report")(_report.report)
app.command("plan")(_plan.plan)
app.command("run")(_run.run)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
