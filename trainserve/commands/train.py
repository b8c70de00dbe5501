"""`trainserve train` and `trainserve compare` (not built yet)."""

from __future__ import annotations

from trainserve.errors import UserError, cli_errors


@cli_errors
def train() -> None:
    """Not built yet."""
    raise UserError("trainserve train is not built yet")


@cli_errors
def compare() -> None:
    """Not built yet."""
    raise UserError("trainserve compare is not built yet")
