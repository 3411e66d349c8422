"""UTC days: a held interval cut at midnights, and the range of days a report may cover."""

from __future__ import annotations

import datetime as dt

from pydantic import BaseModel, ConfigDict

DAY_MS = 86_400_000
MAX_REPORT_DAYS = 92  # a quarter: the most days one report covers (its answer grows with them)
DEFAULT_REPORT_DAYS = 30
_EPOCH = dt.date(1970, 1, 1)


class DaySpan(BaseModel):
    """``ms`` of an interval that fell on ``day`` (UTC, ``YYYY-MM-DD``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    day: str
    ms: int


def day_of(ms: int) -> str:
    """The UTC day of a time in ms since the epoch, ``YYYY-MM-DD``."""
    return (_EPOCH + dt.timedelta(days=ms // DAY_MS)).isoformat()


def split_days(start_ms: int, end_ms: int) -> tuple[DaySpan, ...]:
    """``[start_ms, end_ms)`` cut at each UTC midnight, oldest day first (nothing for an empty interval)."""
    spans = []
    t = start_ms
    while t < end_ms:
        midnight = (t // DAY_MS + 1) * DAY_MS
        spans.append(DaySpan(day=day_of(t), ms=min(end_ms, midnight) - t))
        t = midnight
    return tuple(spans)


class DayRange(BaseModel):
    """The days a report covers, both included."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    first: dt.date
    last: dt.date

    @property
    def days(self) -> int:
        return (self.last - self.first).days + 1

    def bounds(self) -> tuple[str, str]:
        return self.first.isoformat(), self.last.isoformat()


class RangeProblem(BaseModel):
    """Why a range cannot be reported: the sentence a 400 says."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    message: str


def _date(name: str, text: str) -> dt.date | RangeProblem:
    shown = text if len(text) <= 40 and text.isprintable() else text[:40].encode("unicode_escape").decode() + "..."
    if len(text) != 10 or not text.isascii():
        return RangeProblem(message=f"{name}: must be a UTC day as YYYY-MM-DD, not {shown!r}")
    try:
        return dt.date.fromisoformat(text)
    except ValueError:
        return RangeProblem(message=f"{name}: must be a UTC day as YYYY-MM-DD, not {shown!r}")


def day_range(first: str | None, last: str | None, today: dt.date,
              most: int = MAX_REPORT_DAYS) -> DayRange | RangeProblem:
    """The range ``from``..``to`` asks for: ``to`` defaults to today (UTC), ``from`` to the
    :data:`DEFAULT_REPORT_DAYS` days ending at ``to``; at most ``most`` days, ``from`` not after ``to``."""
    end = today if not last else _date("to", last)
    if isinstance(end, RangeProblem):
        return end
    start = end - dt.timedelta(days=min(DEFAULT_REPORT_DAYS, most) - 1) if not first else _date("from", first)
    if isinstance(start, RangeProblem):
        return start
    if start > end:
        return RangeProblem(message=f"from ({start.isoformat()}) is after to ({end.isoformat()})")
    days = (end - start).days + 1
    if days > most:
        return RangeProblem(message=f"from {start.isoformat()} to {end.isoformat()} is {days} days; a report covers "
                                    f"at most {most}: ask for several")
    return DayRange(first=start, last=end)
