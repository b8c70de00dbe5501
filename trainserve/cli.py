"""The `trainserve` command line: one command per stage, each a few lines over a module.

Stage modules are imported lazily inside each command, so `trainserve load` (and Locust workers)
never import torch.
"""

from __future__ import annotations

import functools
import json
import logging
import sys
from collections.abc import Callable
from typing import ParamSpec, TypeVar

import typer

from trainserve.commands import diff_command as _diff
from trainserve.commands import export_command as _export
from trainserve.commands import frontier_command as _frontier
from trainserve.commands._typer import Args, options_of
from trainserve.commands import limits_command as _limits
from trainserve.commands import load_command as _load
from trainserve.commands import plan_command as _plan
from trainserve.commands import report_command as _report
from trainserve.commands import run_command as _run
from trainserve.commands import serve_command as _serve
from trainserve.commands import train_command as _train
from trainserve.core import diskfull, envs
from trainserve.core.errors import UserError
from trainserve.train import launch

P = ParamSpec("P")
R = TypeVar("R")

app = typer.Typer(
    name="trainserve",  # its help is _root's docstring
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_show_locals=False,
)


@app.callback()
@options_of("trainserve")
def _root(o: Args) -> None:
    """Measure what a model costs to train and to serve, on CPU and GPU, side by side."""
    setup_logging(logging.DEBUG if o.verbose else logging.INFO)


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


def user_errors(fn: Callable[P, R]) -> Callable[P, R]:
    """A command whose UserError (the library's error for a mistake the user can fix, subclasses
    included) becomes that one sentence on stderr and exit code 1, without a traceback."""

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return fn(*args, **kwargs)
        except UserError as e:
            typer.secho(f"error: {e}", err=True, fg="red")
            raise typer.Exit(code=1) from None
        except (OSError, RuntimeError) as e:  # a full disk while writing an artifact: also one sentence
            if (full := diskfull.as_user_error(e)) is None:
                raise
            typer.secho(f"error: {full}", err=True, fg="red")
            raise typer.Exit(code=1) from None

    return wrapper


app.command("train")(user_errors(_train.train))
app.command("compare")(user_errors(_train.compare))
app.command("export")(user_errors(_export.export))
app.command("serve")(user_errors(_serve.serve))
app.command("load")(user_errors(_load.load))
app.command("limits")(user_errors(_limits.limits))
app.command("frontier")(user_errors(_frontier.frontier))
app.command("report")(user_errors(_report.report))
app.command("plan")(user_errors(_plan.plan))
app.command("diff")(user_errors(_diff.diff))
app.command("run")(user_errors(_run.run))


def main() -> None:
    """The `trainserve` command; a torchrun worker started by `train --nproc` gets its arguments from the launcher."""
    if len(sys.argv) == 1 and envs.ARGV.is_set():
        sys.argv = ["trainserve", *worker_args()]
    app()


def worker_args() -> list[str]:
    """The trainserve arguments the `--nproc` launcher handed to its torchrun workers."""
    try:
        args = json.loads(envs.ARGV.text())
    except json.JSONDecodeError as e:
        raise SystemExit(f"{launch.ARGV_ENV} must hold the JSON list `trainserve train --nproc N` writes ({e})") from None
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        raise SystemExit(f"{launch.ARGV_ENV} must hold a JSON list of strings, as `trainserve train --nproc N` writes")
    return args


if __name__ == "__main__":
    main()
