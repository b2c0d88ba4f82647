"""Human-readable numbers (seconds, bytes, shares, rates): used by the findings' texts and the
views alike, so it lies below both."""

from __future__ import annotations


def seconds(value: float | None) -> str:
    if value is None:
        return "–"
    if value < 1e-3:
        return f"{value * 1e6:.0f} µs"
    if value < 1:
        return f"{value * 1e3:.2f} ms"
    if value < 120:
        return f"{value:.2f} s"
    return f"{value / 60:.1f} min"


def size(value: int | float | None) -> str:
    if value is None:
        return "–"
    step = 1024.0
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(value) < step:
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= step
    return f"{value:.1f} TiB"


def share(part: float, whole: float) -> str:
    return f"{100 * part / whole:.0f}%" if whole > 0 else "–"


def rate(value: float | None) -> str:
    return "–" if value is None else f"{value:,.1f}"
