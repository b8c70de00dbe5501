"""Repeats: mean, standard deviation and a 95% confidence interval, and whether a difference is noise.

The interval is Student's t over the repeats (n - 1 degrees of freedom): with three repeats the half-width
is 4.3 standard errors, so a few repeats give an honest, wide interval rather than a false precision.
Two figures differ by less than their noise when the difference is smaller than the two half-widths
added (their intervals overlap): the report then says so instead of naming a winner.
"""

from __future__ import annotations

import math
from typing import Any

# two-sided 95% quantiles of Student's t, by degrees of freedom; beyond the table the normal 1.96
_T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228,
        11: 2.201, 12: 2.179, 13: 2.160, 14: 2.145, 15: 2.131, 16: 2.120, 17: 2.110, 18: 2.101, 19: 2.093,
        20: 2.086, 25: 2.060, 30: 2.042, 40: 2.021, 60: 2.000, 120: 1.980}


def t95(df: int) -> float:
    """The two-sided 95% quantile of Student's t with `df` degrees of freedom (df >= 1)."""
    if df < 1:
        raise ValueError(f"degrees of freedom {df} < 1")
    if df in _T95:
        return _T95[df]
    above = [k for k in _T95 if k > df]
    return _T95[min(above)] if above else 1.96  # the next tabulated df: slightly narrower, never wider


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
