"""How the report writes numbers and prices: one place, so tables, plots and sentences agree.

Every formatter takes None ("not measured") and returns the em dash, so a missing value is never
shown as 0.
"""

from __future__ import annotations

MISSING = "—"
_KIB = 1024


def num(x: float | None, digits: int = 3) -> str:
    """A count or rate with thousands separators: 98,000 / 363 / 12.4 / 0.052."""
    if x is None:
        return MISSING
    ax = abs(x)
    if ax >= 100:
        return f"{x:,.0f}"
    if ax == 0:
        return "0"
    # significant digits for small values, never scientific notation
    decimals = max(0, digits - 1 - int(_floor_log10(ax)))
    return f"{x:,.{decimals}f}"


def _floor_log10(x: float) -> int:
    import math

    return math.floor(math.log10(x))


def ms(x: float | None) -> str:
    """Milliseconds at 0.01 ms resolution (the profile's resolution): 0.92 ms, 1,204.50 ms."""
    return MISSING if x is None else f"{x:,.2f} ms"


def ratio(x: float | None) -> str:
    """A speedup: 270x, 27.3x, 2.3x, 0.45x."""
    if x is None:
        return MISSING
    if x >= 100:
        return f"{x:,.0f}x"
    if x >= 1:
        return f"{x:.1f}x"
    return f"{x:.2f}x"


def nbytes(x: float | None) -> str:
    """Bytes in binary units: 512 B, 12.0 KiB, 1.10 GiB."""
    if x is None:
        return MISSING
    value = float(x)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < _KIB or unit == "TiB":
            if unit == "B" or abs(value) >= 100:
                return f"{value:.0f} {unit}"
            return f"{value:.2f} {unit}" if abs(value) < 10 else f"{value:.1f} {unit}"
        value /= _KIB
    raise AssertionError("unreachable")


def percent(x: float | None, digits: int = 0) -> str:
    return MISSING if x is None else f"{x:.{digits}f}%"


def fraction(x: float | None) -> str:
    """A 0..1 fraction (MFU) as a percentage with one decimal."""
    return MISSING if x is None else f"{100 * x:.1f}%"


def watts(x: float | None) -> str:
    return MISSING if x is None else f"{x:,.0f} W" if x >= 10 else f"{x:.1f} W"


def joules(x: float | None) -> str:
    """Energy per sample spans decades: J, mJ or µJ."""
    if x is None:
        return MISSING
    if x >= 1:
        return f"{x:.2f} J"
    if x >= 1e-3:
        return f"{x * 1e3:.2f} mJ"
    return f"{x * 1e6:.2f} µJ"


def flops(x: float | None) -> str:
    """FLOPs per sample: 1.23 GFLOP, 45.6 MFLOP."""
    if x is None:
        return MISSING
    for scale, unit in ((1e12, "TFLOP"), (1e9, "GFLOP"), (1e6, "MFLOP"), (1e3, "kFLOP")):
        if x >= scale:
            return f"{x / scale:.2f} {unit}"
    return f"{x:.0f} FLOP"


def tflops(x: float | None) -> str:
    return MISSING if x is None else f"{x:.3g} TFLOP/s"


def samples_s(x: float | None) -> str:
    return MISSING if x is None else f"{num(x)} samples/s"


def usd(x: float | None) -> str:
    """Dollars with enough digits to compare small unit costs: $1,234 / $12.3 / $0.0456 / $0.000012."""
    if x is None:
        return MISSING
    if x >= 100:
        return f"${x:,.0f}"
    if x >= 1:
        return f"${x:,.2f}"
    return "$" + num(x, 3)


def kwh(x: float | None) -> str:
    return MISSING if x is None else f"{num(x, 3)} kWh"


def cents(x: float) -> str:
    """Dollars to the cent, for totals per hour: $21.76, $1,234.50."""
    return f"${x:,.2f}"


def price(x: float, digits: int | None = None) -> str:
    """A price as given ($0.048, $2.5); `digits`: significant digits, for a derived price ($7.912)."""
    return f"${x:g}" if digits is None else f"${x:.{digits}g}"
