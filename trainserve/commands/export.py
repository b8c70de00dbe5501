"""`trainserve export` (not built yet)."""

from __future__ import annotations

from trainserve.errors import UserError, cli_errors


@cli_errors
def export() -> None:
    """Not built yet."""
    raise UserError("trainserve export is not built yet")
