"""Human-readable numbers (seconds, bytes, shares, rates) and lists: used by the findings'
texts and the views alike, so it lies below both."""

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


def and_list(items: list[str]) -> str:
    """``a``, ``a and b``, ``a, b and c``."""
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def failed_step(phase: str | None, done: int) -> str:
    """The step an error left, counted from 1 as people count (`done`: the steps of its phase
    that completed before it): "train step 4", "function call 6", "loop iteration 2"."""
    label = {"function": "function call", "loop": "loop iteration"}.get(
        phase or "train", f"{phase or 'train'} step"
    )
    return f"{label} {done + 1}"


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


# Evidence keys measured in a unit say so by their names (the JSON keeps the raw numbers).
_DIMENSIONLESS = ("ratio", "r2", "rho", "rank_correlation", "slope")


def evidence_value(key: str, value: object) -> str:
    """One evidence value for reading, in the unit its key names: ``*_bytes`` as MiB/GiB,
    ``*_s`` (and ``*_s_per_*``, ``s_per_*``) as ms/s, ``*share*`` (a fraction) as a
    percentage, ``*_per_s`` as a rate, ``*_percent`` as a percentage; counts with thousands
    separators. Anything else (text, lists) as it is."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    name = key.lower()
    if value != value:  # NaN
        return "–"
    if name.endswith("_bytes") or name.endswith("bytes_per_step"):
        return size(value)
    if name.endswith("_per_s"):
        return f"{value:,.1f}/s"
    if name.endswith("_percent"):
        return f"{value:.0f} %"
    if "share" in name:
        return f"{100 * value:.1f} %"
    if name.endswith("_s") or "_s_per_" in name or name.startswith("s_per_"):
        return seconds(value)
    if name in _DIMENSIONLESS:
        return f"{value:.3g}"
    if isinstance(value, int):
        return f"{value:,}"
    return f"{value:,.0f}" if abs(value) >= 1000 and value == int(value) else f"{value:.4g}"


def evidence_text(key: str, value: object) -> str:
    """An evidence value of any shape for reading: a number in its key's unit
    (`evidence_value`); a mapping keyed by measures (``*_s``) in their own units, by names
    ("worker 1") in the unit of `key`; a list item by item, a record in it (a pipeline's stage,
    a model that did not learn) as its own keys and values, empty ones left out."""
    if isinstance(value, dict):
        return ", ".join(
            f"{k}: {evidence_value(str(k) if '_' in str(k) else key, v)}" for k, v in value.items()
        )
    if isinstance(value, (list, tuple)):
        return ", ".join(_item_text(key, item) for item in value)
    return evidence_value(key, value)


def _item_text(key: str, item: object) -> str:
    if not isinstance(item, dict):
        return evidence_value(key, item)
    fields = (
        f"{k} {evidence_value(str(k), v)}"
        for k, v in item.items()
        if v is not None and v != "" and v != [] and v != {}
    )
    return "(" + ", ".join(fields) + ")"
