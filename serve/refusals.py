"""What the front ends refused before a request reached a model, counted for /metrics (issue 27 item 3).

One counter per (front end, reason): `connections` (beyond --max-connections), `body_timeout` (a request
whose head or body did not arrive within --body-timeout-s) and `flood` (a gRPC connection ended for PINGs /
SETTINGS it did not read the answers of, or for cancelling calls faster than serve/grpc_h2.py allows). The core carries one Refusals; every front end
gets the core, so HTTP and gRPC count into the same place and the metrics front end reads it.
"""

from __future__ import annotations

METRIC = "trainserve_refused_total"
HELP = "Requests and connections refused before reaching a model, by front end and reason"
REASONS = ("connections", "body_timeout", "flood")
FRONTENDS = ("http", "grpc")


class Refusals:
    """Counters by (front end, reason); every pair exists from the start, so a dashboard sees zeros."""

    def __init__(self) -> None:
        self.counts: dict[tuple[str, str], int] = {(f, r): 0 for f in FRONTENDS for r in REASONS}

    def add(self, frontend: str, reason: str, n: int = 1) -> None:
        self.counts[(frontend, reason)] = self.counts.get((frontend, reason), 0) + n

    def get(self, frontend: str, reason: str) -> int:
        return self.counts.get((frontend, reason), 0)

    def exposition(self) -> list[str]:
        """Prometheus text lines (format 0.0.4) of the counter."""
        lines = [f"# HELP {METRIC} {HELP}", f"# TYPE {METRIC} counter"]
        lines += [f'{METRIC}{{frontend="{f}",reason="{r}"}} {n}' for (f, r), n in sorted(self.counts.items())]
        return lines


def of(core: object) -> Refusals:
    """The core's Refusals (made on first use, so a stand-in core in a test works too)."""
    refusals = getattr(core, "refusals", None)
    if refusals is None:
        refusals = Refusals()
        try:
            core.refusals = refusals  # type: ignore[attr-defined]
        except AttributeError:  # no core (a front end started alone): its counts stay its own
            pass
    return refusals
