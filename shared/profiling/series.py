"""A task's usage over time, bounded: recent points at the sampling interval, older ones coarser.

A series is levels of points, finest (newest) first, each level oldest point first. A sample joins level 0;
when a level holds more than its capacity, its oldest ``factor`` points are merged into one point of the
next level. The last level, when full, merges its points in pairs, so a task's start is never lost, only
blurred. At the default 10 s interval: 20 minutes at 10 s, 2 hours at 1 minute, a day at 10 minutes, a
week at an hour, and older weeks coarser still; never more than :data:`MAX_POINTS` points.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator

from shared.profiling.usage import Usage, merge


class Level(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    capacity: int = Field(ge=2)
    factor: int = Field(ge=2)  # how many of its oldest points make one point of the next level (the last: of itself)

    @model_validator(mode="after")
    def _fits(self) -> Level:
        if self.factor > self.capacity:
            raise ValueError(f"factor {self.factor} > capacity {self.capacity}: an overflow would empty the level")
        return self


LEVELS: tuple[Level, ...] = (Level(capacity=120, factor=6), Level(capacity=120, factor=10),
                             Level(capacity=144, factor=6), Level(capacity=168, factor=2))
MAX_POINTS = sum(level.capacity for level in LEVELS)


class Series(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    levels: tuple[tuple[Usage, ...], ...] = ()

    def points(self, since_ms: int = 0) -> list[Usage]:
        """Every point, oldest first (those ending after ``since_ms``)."""
        return [p for level in reversed(self.levels) for p in level if p.t_ms > since_ms]

    @property
    def size(self) -> int:
        return sum(len(level) for level in self.levels)

    def last(self, n: int) -> list[Usage]:
        """The newest ``n`` points, oldest first."""
        return self.points()[-n:] if n > 0 else []


class Added(BaseModel):
    """A series after a point joined it; ``deeper``: how many levels past the first changed (1..deeper),
    so a store rewrites only those and appends to the first."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    series: Series
    deeper: int


def add(series: Series, point: Usage, levels: tuple[Level, ...] = LEVELS) -> Added:
    """``series`` with ``point`` (newer than every point in it) added, coarsened where a level overflows.
    At least two levels: the finest is only ever appended to and trimmed, which is what a store's append
    (and ``deeper``) relies on."""
    if len(levels) < 2:
        raise ValueError("a series needs at least two levels")
    lv = [list(level) for level in series.levels] + [[] for _ in range(len(levels) - len(series.levels))]
    lv[0].append(point)
    deeper = 0
    for i, level in enumerate(levels):
        if len(lv[i]) <= level.capacity:
            break
        if i == len(levels) - 1:
            lv[i] = [merge(lv[i][j:j + level.factor]) for j in range(0, len(lv[i]), level.factor)]
            deeper = i
        else:
            lv[i + 1].append(merge(lv[i][:level.factor]))
            del lv[i][:level.factor]
            deeper = i + 1
    return Added(series=Series(levels=tuple(tuple(level) for level in lv)), deeper=deeper)
