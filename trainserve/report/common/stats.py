"""Repeats: mean, standard deviation and a 95% confidence interval, and whether a difference is noise.

The interval is Student's t over the repeats (n - 1 degrees of freedom): with three repeats the half-width
is 4.3 standard errors, so a few repeats give an honest, wide interval rather than a false precision.
Two figures differ by less than their noise when the difference is smaller than the two half-widths
added (their intervals overlap): the report then says so instead of naming a winner.
"""

from __future__ import annotations

import math
from typing import Any


def t95(df: int) -> float:
    """The two-sided 95% quantile of Student's t with `df` degrees of freedom (df >= 1), from scipy: exact for
    every df, where a printed table rounds the ones it skips."""
    if df < 1:
        raise ValueError(f"degrees of freedom {df} < 1")
    from scipy.stats import t  # here: scipy.stats takes a few hundred ms to import, and only intervals need it

    return float(t.ppf(0.975, df))


def ci95(values: list[float | None]) -> dict[str, Any] | None:
    """{"n", "mean", "sd", "half_width", "low", "high"} of the values given (None ones left out); None when
    fewer than two (one run has no spread)."""
    xs = [float(v) for v in values if v is not None]
    if len(xs) < 2:
        return None
    n = len(xs)
    mean = sum(xs) / n
    sd = math.sqrt(sum((x - mean) ** 2 for x in xs) / (n - 1))
    half = t95(n - 1) * sd / math.sqrt(n)
    return {"n": n, "mean": mean, "sd": sd, "half_width": half, "low": mean - half, "high": mean + half}


def within_noise(a: dict[str, Any] | None, b: dict[str, Any] | None) -> bool | None:
    """True when two intervals' means differ by less than their half-widths together; None without both."""
    if a is None or b is None:
        return None
    return abs(a["mean"] - b["mean"]) < a["half_width"] + b["half_width"]
