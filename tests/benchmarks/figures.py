"""The figures the benchmarks print: how one grows with its size (a fitted exponent), and percentiles."""

from __future__ import annotations

import math
from collections.abc import Sequence


def exponent(sizes: Sequence[float], values: Sequence[float]) -> float:
    """The least-squares slope of log(value) over log(size): 1 is linear, 2 quadratic (0 for one size)."""
    xs, ys = [math.log(s) for s in sizes], [math.log(max(v, 1e-6)) for v in values]
    if len(xs) < 2:
        return 0.0
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum((x - mx) ** 2 for x in xs)


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q`` quantile (0..1) of ``values``, nearest rank (0 for none)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))] if ordered else 0.0
