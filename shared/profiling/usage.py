"""A task's use of its resources over one span of time."""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict

Row = list[float | int | None]


class Usage(BaseModel):
    """What a task used over ``[t_ms - span_ms, t_ms]``: means over the span, and the peak of its memory.

    ``None`` is "not measured", never zero: network counters of a task on the host network are the node's
    (``net_*`` is None), a task without GPUs or a node without NVML has no GPU reading.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")
    t_ms: int  # end of the span, ms since the epoch
    span_ms: int
    cpu: float  # cores busy (1.0: one core all the span)
    mem: int  # bytes in use (the engine's figure: usage less inactive file cache), mean
    mem_peak: int  # bytes, the highest sample of the span
    net_rx: float | None = None  # bytes per second
    net_tx: float | None = None
    blk_read: float | None = None  # bytes per second
    blk_write: float | None = None
    gpu_util: float | None = None  # percent, the mean over the task's GPUs
    gpu_mem: int | None = None  # bytes in use on the task's GPUs

    @property
    def start_ms(self) -> int:
        return self.t_ms - self.span_ms

    def row(self) -> Row:
        """The compact form stored (a list in field order)."""
        return [self.t_ms, self.span_ms, round(self.cpu, 4), self.mem, self.mem_peak, _r(self.net_rx),
                _r(self.net_tx), _r(self.blk_read), _r(self.blk_write), _r(self.gpu_util), self.gpu_mem]

    @classmethod
    def from_row(cls, row: Sequence[float | int | None]) -> Usage:
        return cls.model_validate(dict(zip(_FIELDS, row, strict=True)))


_FIELDS = tuple(Usage.model_fields)


def _r(value: float | None) -> float | None:
    return None if value is None else round(value, 2)


def _mean(points: Sequence[Usage], values: Sequence[float | None]) -> float | None:
    """The span-weighted mean of the values measured (None when none was)."""
    weighted = [(v, p.span_ms) for v, p in zip(values, points, strict=True) if v is not None]
    total = sum(w for _, w in weighted)
    if not weighted:
        return None
    if total <= 0:
        return sum(v for v, _ in weighted) / len(weighted)
    return sum(v * w for v, w in weighted) / total


def merge(points: Sequence[Usage]) -> Usage:
    """One point for consecutive ``points`` (oldest first): span-weighted means, the highest peak."""
    if not points:
        raise ValueError("merge needs at least one point")
    if len(points) == 1:
        return points[0]
    gpu_mem = _mean(points, [p.gpu_mem for p in points])
    return Usage(
        t_ms=points[-1].t_ms, span_ms=points[-1].t_ms - points[0].start_ms,
        cpu=_mean(points, [p.cpu for p in points]) or 0.0,
        mem=round(_mean(points, [p.mem for p in points]) or 0),
        mem_peak=max(p.mem_peak for p in points),
        net_rx=_mean(points, [p.net_rx for p in points]), net_tx=_mean(points, [p.net_tx for p in points]),
        blk_read=_mean(points, [p.blk_read for p in points]), blk_write=_mean(points, [p.blk_write for p in points]),
        gpu_util=_mean(points, [p.gpu_util for p in points]),
        gpu_mem=None if gpu_mem is None else round(gpu_mem))
