"""`trainserve load` (not built yet)."""

from __future__ import annotations

from trainserve.errors import UserError, cli_errors


@cli_errors
def load() -> None:
    """Not built yet."""
    raise UserError("trainserve load is not built yet")
