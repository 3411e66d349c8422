"""The orders of ``GET /api/v2/jobs`` (OpenPAI v1.8's ``order=<field>,ASC|DESC``): what each sorts by, the one
total order each means, and the cursor that continues it. Pure: no I/O.

v1.8 sorted by one column in its database and left ties to it. paiq makes every order total and the same on
every page: the field in the direction asked, then newest first (``created_ms`` descending, then ``_id``), so
that "each value's newest-first list, the values in the order's direction" is the order, and each value's list
is one of the lists :mod:`shared.db.lists.paging` already serves. ``submissionTime,ASC`` is the exact reverse of
the default (``created_ms`` ascending, then ``_id`` descending). ``completionTime`` and ``jobPriority`` put the
jobs without one (active jobs; a config without a class) last ascending and first descending, as v1.8's
``NULLS LAST`` / ``NULLS FIRST``. Strings compare by code point (MongoDB's binary order).
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass
from functools import total_ordering
from typing import Any

from shared.db.lists.paging import CursorError, JobSummary
from shared.records import JobState

# v1.8's order fields -> the job document's field
FIELDS: dict[str, str] = {
    "jobName": "name", "submissionTime": "created_ms", "username": "user", "vc": "virtual_cluster",
    "retries": "retries", "totalTaskNumber": "task_count", "totalGpuNumber": "gpu_count", "state": "state",
    "completionTime": "completed_ms", "jobPriority": "job_priority",
}
DEFAULT = "submissionTime,DESC"
ALL = tuple(f"{name},{way}" for name in FIELDS for way in ("ASC", "DESC"))
Value = int | str | None


class OrderError(ValueError):
    """An ``order`` that is not one of v1.8's."""


@dataclass(frozen=True)
class Order:
    name: str  # v1.8's field name
    descending: bool

    @classmethod
    def parse(cls, text: str | None) -> Order:
        name, _, way = (text or DEFAULT).partition(",")
        if name not in FIELDS or way not in ("ASC", "DESC"):
            raise OrderError(f"order: one of {', '.join(FIELDS)}, then ,ASC or ,DESC (e.g. {DEFAULT})")
        return cls(name, way == "DESC")

    @property
    def text(self) -> str:
        return f"{self.name},{'DESC' if self.descending else 'ASC'}"

    @property
    def field(self) -> str:
        return FIELDS[self.name]

    @property
    def is_default(self) -> bool:
        return self.text == DEFAULT

    def value_of(self, job: JobSummary) -> Value:
        value = getattr(job, self.field)
        if isinstance(value, JobState):
            return value.value
        return value if value is None or isinstance(value, (int, str)) else str(value)

    def rank(self, value: Value, created_ms: int, job_id: str) -> tuple[Any, ...]:
        """The position key of a job in this order: ascending over it is the order."""
        if self.name == "submissionTime":
            return (Desc(created_ms), job_id) if self.descending else (created_ms, Desc(job_id))
        key = (1, 0) if value is None else (0, value)  # no value: after every value ascending
        return (Desc(key) if self.descending else key, Desc(created_ms), job_id)

    def rank_of(self, job: JobSummary) -> tuple[Any, ...]:
        return self.rank(self.value_of(job), job.created_ms, job.id)

    def values_in_order(self, values: set[Value]) -> list[Value]:
        """Distinct values of the field as this order visits them."""
        return sorted(values, key=lambda v: self.rank(v, 0, "")[0])

    def sort(self, jobs: list[JobSummary]) -> list[JobSummary]:
        return sorted(jobs, key=self.rank_of)


@total_ordering
class Desc:
    """A value compared backwards (the descending part of a sort key)."""

    __slots__ = ("v",)

    def __init__(self, v: Any) -> None:
        self.v = v

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Desc) and self.v == other.v

    def __lt__(self, other: Desc) -> bool:
        return bool(other.v < self.v)

    def __hash__(self) -> int:
        return hash(self.v)


@dataclass(frozen=True)
class OrderCursor:
    """Where a page of an order ended: the order, its last job's value of the field, creation time and id."""

    order: str
    value: Value
    created_ms: int
    job_id: str

    @classmethod
    def after(cls, order: Order, job: JobSummary) -> OrderCursor:
        return cls(order.text, order.value_of(job), job.created_ms, job.id)

    def encode(self) -> str:
        raw = json.dumps(["o", self.order, self.value, self.created_ms, self.job_id], separators=(",", ":")).encode()
        return base64.urlsafe_b64encode(raw).decode().rstrip("=")

    @classmethod
    def decode(cls, text: str, order: Order) -> OrderCursor:
        bad = f"cursor: not a cursor of order={order.text} this server gave out (use X-Next-Cursor as it came)"
        try:
            tag, name, value, created, job_id = json.loads(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))
        except (binascii.Error, ValueError, TypeError) as e:
            raise CursorError(bad) from e
        if (tag != "o" or name != order.text or not isinstance(job_id, str) or isinstance(created, bool)
                or not isinstance(created, int) or not (value is None or isinstance(value, (int, str)))
                or isinstance(value, bool)):
            raise CursorError(bad)
        return cls(name, value, created, job_id)

    def rank(self, order: Order) -> tuple[Any, ...]:
        return order.rank(self.value, self.created_ms, self.job_id)
