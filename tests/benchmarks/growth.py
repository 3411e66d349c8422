"""How a benchmark's figure grows with its size: the fitted exponent the benchmarks print."""

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
