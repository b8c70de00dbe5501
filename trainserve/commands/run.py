"""`trainserve run` (not built yet)."""

from __future__ import annotations

from trainserve.errors import UserError, cli_errors


@cli_errors
def run() -> None:
    """Not built yet."""
    raise UserError("trainserve run is not built yet")
