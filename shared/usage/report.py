"""What a usage report shows and to whom: the rollup rows a caller may read, and the rows in hours.

Administrators see every row. A user sees their own rows (in any virtual cluster) and every row of the
virtual clusters they may use (the ones that admit them by name, group or ``*``: ``default`` admits
everyone, so its rows are everyone's to see). A report reads rows by virtual cluster and user
(``by="user"``), or each virtual cluster's totals (``by="vc"``, every user summed).
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict

from shared.usage.counting import Amounts

By = Literal["user", "vc"]
HOURS_DIGITS = 6


class Asker(BaseModel):
    """Who asks: their name, whether they are an administrator, the virtual clusters that admit them."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    user: str
    admin: bool
    vcs: tuple[str, ...] = ()


class Asked(BaseModel):
    """What was asked for besides the days: rows by user or by VC, one VC, one user."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    by: By = "user"
    vc: str | None = None
    user: str | None = None


class RowFilter(BaseModel):
    """One read of the rollups: rows of ``user`` (None: any) in ``vcs`` (None: any; empty: none)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    user: str | None = None
    vcs: tuple[str, ...] | None = None

    @property
    def empty(self) -> bool:
        return self.vcs is not None and not self.vcs


class Refusal(BaseModel):
    """Why a report is refused: 400 (a wrong question) or 403 (rows the asker may not see)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    status: Literal[400, 403]
    message: str


def _one(vc: str | None) -> tuple[str, ...] | None:
    return None if vc is None else (vc,)


def row_filters(asker: Asker, asked: Asked) -> tuple[RowFilter, ...] | Refusal:
    """The reads whose rows, together, answer ``asked`` for ``asker`` (no row outside what they may see)."""
    if asked.by == "vc" and asked.user is not None:
        return Refusal(status=400, message="user: by=vc sums every user of each virtual cluster; "
                                           "ask by=user for one user's rows")
    if asker.admin:
        return (RowFilter(user=asked.user, vcs=_one(asked.vc)),)
    mine = tuple(sorted(asker.vcs))
    if asked.vc is not None:
        if asked.vc in mine:
            return (RowFilter(user=asked.user, vcs=(asked.vc,)),)
        if asked.by == "user" and asked.user == asker.user:
            return (RowFilter(user=asker.user, vcs=(asked.vc,)),)  # their own use of a VC they left
        return Refusal(status=403, message=f"user {asker.user} may see only their own usage and that of the "
                                           f"virtual clusters they may use, not virtual cluster {asked.vc}'s")
    if asked.by == "vc":
        return (RowFilter(vcs=mine),)
    if asked.user == asker.user:
        return (RowFilter(user=asker.user),)
    if asked.user is not None:
        return (RowFilter(user=asked.user, vcs=mine),)
    return (RowFilter(user=asker.user), RowFilter(vcs=mine))


class ReportRow(BaseModel):
    """A row as a report shows it: hours (rounded to the second's worth), utilisation in percent."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    day: str
    vc: str
    user: str | None  # None: every user of the VC (by="vc")
    gpu_hours_held: float
    gpu_hours_used: float
    gpu_hours_measured: float
    gpu_utilization: float | None  # used over measured, percent; None: nothing measured
    cpu_core_hours_held: float
    cpu_core_hours_used: float
    jobs: int
    attempts: int


def _hours(seconds: float) -> float:
    return round(seconds / 3600, HOURS_DIGITS)


def report_row(day: str, vc: str, user: str | None, a: Amounts) -> ReportRow:
    return ReportRow(day=day, vc=vc, user=user, gpu_hours_held=_hours(a.gpu_held_s),
                     gpu_hours_used=_hours(a.gpu_used_s), gpu_hours_measured=_hours(a.gpu_measured_s),
                     gpu_utilization=round(100 * a.gpu_used_s / a.gpu_measured_s, 2) if a.gpu_measured_s > 0 else None,
                     cpu_core_hours_held=_hours(a.cpu_held_s), cpu_core_hours_used=_hours(a.cpu_used_s),
                     jobs=a.jobs, attempts=a.attempts)


def sorted_rows(rows: Iterable[ReportRow]) -> list[ReportRow]:
    return sorted(rows, key=lambda r: (r.day, r.vc, r.user or ""))


CSV_COLUMNS = ("day", "vc", "user", "gpu_hours_held", "gpu_hours_used", "gpu_hours_measured", "gpu_utilization",
               "cpu_core_hours_held", "cpu_core_hours_used", "jobs", "attempts")


def csv_text(rows: Sequence[ReportRow]) -> str:
    """The rows as CSV (a header line first; an empty cell where a value is None)."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for r in rows:
        writer.writerow(["" if (v := getattr(r, c)) is None else v for c in CSV_COLUMNS])
    return out.getvalue()


def totals(rows: Iterable[ReportRow]) -> dict[str, Amounts]:
    """Each VC's rows summed back into amounts (hours as seconds), for a total line."""
    out: dict[str, Amounts] = {}
    for r in rows:
        a = Amounts(gpu_held_s=r.gpu_hours_held * 3600, gpu_measured_s=r.gpu_hours_measured * 3600,
                    gpu_used_s=r.gpu_hours_used * 3600, cpu_held_s=r.cpu_core_hours_held * 3600,
                    cpu_used_s=r.cpu_core_hours_used * 3600, jobs=r.jobs, attempts=r.attempts)
        out[r.vc] = out[r.vc].plus(a) if r.vc in out else a
    return out
