"""The one exception type for a user's mistake, and the CLI's way of showing it."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
R = TypeVar("R")


class UserError(Exception):
    """A mistake the user can fix: its message is one sentence saying what is wrong and what to do.

    The CLI prints it to stderr without a traceback and exits with code 1.
    """


def cli_errors(fn: Callable[P, R]) -> Callable[P, R]:
    """Wrap a typer command so a UserError becomes one line on stderr and exit code 1."""

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        import typer

        try:
            return fn(*args, **kwargs)
        except UserError as e:
            typer.secho(f"error: {e}", err=True, fg="red")
            raise typer.Exit(code=1) from None

    return wrapper
