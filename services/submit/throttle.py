"""What callers without a valid token may ask of the database: heavy reads within one shared budget.

Reads need no token (as in OpenPAI), so anyone who can reach the API could keep the database busy with
requests that each read a lot. Those requests, when they come without a valid token, are *heavy reads*
(:func:`is_heavy`): a list page past the first :data:`LIGHT_JOBS` jobs (an ``offset``, or a ``limit`` over
it) and a whole job's profile (every task's series). Together, all anonymous callers get
``PAIQ_ANONYMOUS_HEAVY_READS`` of them a second (a token bucket holding as many, so a second's worth may
come at once) and at most :data:`IN_FLIGHT` at a time; beyond that the answer is 429
TooManyRequestsError with ``Retry-After``, before the database is asked anything. A caller with a token
is not limited here: it is known, and its reads are its own (paging by cursor costs a page anyway).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

LIGHT_JOBS = 100  # a first list page of at most this many jobs is not a heavy read
IN_FLIGHT = 2  # anonymous heavy reads answered at once, at most
LIST_ROUTES = frozenset({"/api/v1/jobs", "/api/v1/user/{user}/jobs"})
WHOLE_JOB_ROUTES = frozenset({"/api/v1/user/{user}/jobs/{job}/profile"})


def is_heavy(route: str, query: Mapping[str, str]) -> bool:
    """Whether an anonymous request of ``route`` (the route's pattern) with ``query`` is a heavy read. A
    number that is not one is not heavy: the route refuses it (400) without reading anything."""
    if route in WHOLE_JOB_ROUTES:
        return True
    if route not in LIST_ROUTES:
        return False
    return _number(query.get("offset"), 0) > 0 or _number(query.get("limit"), 1000) > LIGHT_JOBS


def _number(raw: str | None, default: int) -> int:
    if raw is None:
        return default
    return int(raw) if raw.isascii() and raw.isdigit() and len(raw) <= 7 else 0


@dataclass
class Budget:
    """A token bucket of ``rate`` reads a second holding at most ``rate`` (at least one), and a bound on
    the reads in flight. ``clock``: seconds, monotonic (injectable for tests)."""

    rate: float
    clock: Callable[[], float] = time.monotonic
    in_flight: int = 0
    tokens: float = -1.0
    at: float = 0.0

    def __post_init__(self) -> None:
        self.tokens, self.at = self.capacity, self.clock()

    @property
    def capacity(self) -> float:
        return max(1.0, self.rate)

    def take(self) -> int | None:
        """Start a read: None when it may go (call :meth:`done` after it), else the whole seconds to wait."""
        if self.rate <= 0:
            return 60  # anonymous heavy reads are off: sign in
        now = self.clock()
        self.tokens = min(self.capacity, self.tokens + (now - self.at) * self.rate)
        self.at = now
        if self.in_flight >= IN_FLIGHT:
            return 1
        if self.tokens < 1:
            return max(1, math.ceil((1 - self.tokens) / self.rate))
        self.tokens -= 1
        self.in_flight += 1
        return None

    def done(self) -> None:
        self.in_flight = max(0, self.in_flight - 1)
