"""Scraping the server's Prometheus metrics during a load test (Triton's names, which ours shares).

Gauges (nv_gpu_utilization 0..1, nv_gpu_memory_used_bytes, nv_gpu_power_usage W,
nv_cpu_utilization 0..1) are sampled every `interval_s`; counters (nv_energy_consumption J,
nv_inference_* counts and *_duration_us) are read as the difference between the first and last
scrape of the window, per model when the metric has a model label.
"""

from __future__ import annotations

import logging
import threading
import time
import urllib.error
import urllib.request
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

log = logging.getLogger(__name__)

GAUGES = ("nv_gpu_utilization", "nv_gpu_memory_used_bytes", "nv_gpu_power_usage", "nv_cpu_utilization",
          "nv_cpu_memory_used_bytes")
COUNTERS = ("nv_energy_consumption", "nv_inference_request_success", "nv_inference_request_failure",
            "nv_inference_count", "nv_inference_exec_count", "nv_inference_request_duration_us",
            "nv_inference_queue_duration_us", "nv_inference_compute_input_duration_us",
            "nv_inference_compute_infer_duration_us", "nv_inference_compute_output_duration_us")


def parse_prometheus(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """{metric name: [(labels, value), ...]} from the Prometheus text exposition format.

    Raises ValueError on text that is not in that format.
    """
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            # the parser appends "_total" to a counter's samples (the OpenMetrics naming); Triton's
            # counters carry no such suffix, so a counter is keyed by its family name, as exposed
            name = family.name if family.type == "counter" else sample.name
            out.setdefault(name, []).append((dict(sample.labels), float(sample.value)))
    return out


def _total(samples: list[tuple[dict[str, str], float]] | None, model: str | None) -> float | None:
    if not samples:
        return None
    chosen = [v for labels, v in samples if model is None or labels.get("model", model) == model]
    return sum(chosen) if chosen else None


class MetricsScraper:
    """Scrapes `url` every `interval_s` s in a thread between start() and stop()."""

    def __init__(self, url: str, model: str, interval_s: float = 1.0, timeout_s: float = 2.0) -> None:
        self.url, self.model, self.interval_s, self.timeout_s = url, model, interval_s, timeout_s
        self.scrapes: list[tuple[float, dict[str, list[tuple[dict[str, str], float]]]]] = []
        self.error: str | None = None
        self._wall_offset_s = time.time() - time.monotonic()  # a scrape's wall time: its monotonic time + this
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def scrape_once(self) -> bool:
        try:
            with urllib.request.urlopen(self.url, timeout=self.timeout_s) as r:
                text = r.read().decode("utf-8", "replace")
            metrics = parse_prometheus(text)
        except (urllib.error.URLError, OSError, ValueError) as e:
            self.error = f"{self.url}: {e}"
            return False
        self.scrapes.append((time.monotonic(), metrics))
        return True

    def start(self) -> MetricsScraper:
        self._thread = threading.Thread(target=self._run, name="metrics-scraper", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            self.scrape_once()
            self._stop.wait(self.interval_s)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(self.timeout_s + 1)
        self.scrape_once()

    def summary(self, wall_window: tuple[float, float] | None = None) -> dict[str, Any]:
        """Gauge means/maxima and counter deltas over the scraped window (None where not served).

        `wall_window` (wall-clock start and end, time.time()) narrows them to the scrapes inside it, e.g. the
        windows a capacity search's figure comes from; with fewer than two scrapes inside, the whole load
        counts, and "wall_window" says so."""
        if not self.scrapes:
            return {"scrapes": 0, "error": self.error}
        scrapes, narrowed = self.scrapes, None
        if wall_window is not None:
            start, end = wall_window
            inside = [sc for sc in self.scrapes if start <= sc[0] + self._wall_offset_s <= end]
            narrowed = len(inside) >= 2 and inside[-1][0] > inside[0][0]
            scrapes = inside if narrowed else self.scrapes
        out: dict[str, Any] = {"scrapes": len(scrapes), "window_s": round(scrapes[-1][0] - scrapes[0][0], 3),
                               "error": self.error}
        if wall_window is not None:
            out["wall_window"] = {"start": round(wall_window[0], 3), "end": round(wall_window[1], 3),
                                  "narrowed": narrowed}
        for g in GAUGES:
            values = []
            for _, m in scrapes:
                series = [v for _, v in m.get(g) or []]
                if series:  # several GPUs: utilisation is their mean, power and memory their sum
                    values.append(sum(series) / len(series) if g.endswith("utilization") else sum(series))
            out[g] = {"mean": round(sum(values) / len(values), 4), "max": round(max(values), 4),
                      "timeline": [round(v, 4) for v in values]} if values else None
        first, last = scrapes[0][1], scrapes[-1][1]
        for c in COUNTERS:
            model = None if c == "nv_energy_consumption" else self.model
            a, b = _total(first.get(c), model), _total(last.get(c), model)
            out[c] = round(b - a, 3) if a is not None and b is not None else None
        n = out.get("nv_inference_request_success")
        if n:
            for c in ("nv_inference_queue_duration_us", "nv_inference_compute_infer_duration_us",
                      "nv_inference_request_duration_us"):
                if out.get(c) is not None:
                    out[c.replace("_duration_us", "_mean_us")] = round(out[c] / n, 2)
        execs, count = out.get("nv_inference_exec_count"), out.get("nv_inference_count")
        if execs and count:
            out["mean_server_batch"] = round(count / execs, 3)  # rows per model execution (dynamic batching)
        return out
