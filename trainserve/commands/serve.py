"""`trainserve serve` (not built yet)."""

from __future__ import annotations

from trainserve.errors import UserError, cli_errors


@cli_errors
def serve() -> None:
    """Not built yet."""
    raise UserError("trainserve serve is not built yet")
