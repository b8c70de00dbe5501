"""What the front ends refused before a request reached a model, counted for /metrics (docs/serving.md).

One counter per (front end, reason): `connections` (beyond --max-connections), `body_timeout` (a request
whose head or body did not arrive within --body-timeout-s), `flood` (a gRPC connection ended for PINGs /
SETTINGS it did not read the answers of, for cancelling calls faster than serve/protocol/h2_connection.py
allows, or for a header block past its size or CONTINUATION bounds), `memory` (a gRPC call refused because
its connection already held its budget of request messages still arriving) and `reply_timeout` (a gRPC call
reset because its reply waited --body-timeout-s for a flow-control window the client never opened: the model
has run, but the answer is refused to a client that does not read it, and counting it here is what shows a
dashboard such clients) and `streams` (a gRPC call opened past the streams one connection may hold open, reset
REFUSED_STREAM: the client may retry it, but a dashboard should see a client that ignores the advertised limit). The core carries one Refusals; every front end gets the core, so HTTP and gRPC
count into the same place and the metrics front end reads it. A refusal worth a log line logs through
`add(..., warning=...)`, at most one line per LOG_EVERY_S for each (front end, reason), so a flood of them
cannot flood the log.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator

from prometheus_client.metrics_core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

log = logging.getLogger(__name__)

METRIC = "trainserve_refused_total"
HELP = "Requests and connections refused before reaching a model, by front end and reason"
REASONS = ("connections", "body_timeout", "flood", "memory", "reply_timeout", "streams")
FRONTENDS = ("http", "grpc")
LOG_EVERY_S = 10.0  # at most one warning line per this many seconds for each (front end, reason)


class Refusals(Collector):
    """Counters by (front end, reason); every pair exists from the start, so a dashboard sees zeros."""

    def __init__(self) -> None:
        self.counts: dict[tuple[str, str], int] = {(f, r): 0 for f in FRONTENDS for r in REASONS}
        self._logged: dict[tuple[str, str], tuple[int, float]] = {}  # count at the last warning, when the next may be

    def add(self, frontend: str, reason: str, n: int = 1, warning: str = "") -> None:
        """Count n refusals; with `warning` (its `{n}`: the refusals since the last such line), log it unless
        a line for this (front end, reason) was logged less than LOG_EVERY_S ago."""
        key = (frontend, reason)
        count = self.counts[key] = self.counts.get(key, 0) + n
        if warning:
            logged, next_at = self._logged.get(key, (0, 0.0))
            now = time.monotonic()
            if now >= next_at:
                log.warning(warning.replace("{n}", str(count - logged)))
                self._logged[key] = (count, now + LOG_EVERY_S)

    def get(self, frontend: str, reason: str) -> int:
        return self.counts.get((frontend, reason), 0)

    def collect(self) -> Iterator[Metric]:
        """The counter's family, read by serve/protocol/prometheus.py's registry at each scrape.

        CounterMetricFamily drops METRIC's `_total` and the exposition puts it back: the name stays
        trainserve_refused_total, its TYPE line `counter`."""
        family = CounterMetricFamily(METRIC, HELP, labels=("frontend", "reason"))
        for labels, n in sorted(self.counts.items()):
            family.add_metric(labels, n)
        yield family


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
