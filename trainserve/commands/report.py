"""`trainserve report` (not built yet)."""

from __future__ import annotations

from trainserve.errors import UserError, cli_errors


@cli_errors
def report() -> None:
    """Not built yet."""
    raise UserError("trainserve report is not built yet")
