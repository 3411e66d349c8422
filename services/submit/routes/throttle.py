"""What callers without a valid token may ask of the database: heavy reads within one shared budget.

Reads need no token (as in OpenPAI), so anyone who can reach the API could keep the database busy with
requests that each read a lot. Those requests, when they come without a valid token, are *heavy reads*:
a list page past the first :data:`LIGHT_JOBS` jobs (an ``offset``, or a ``limit`` over it: OpenPAI's
default page of 1,000 too) and a whole job's profile (every task's series). Together, all anonymous
callers get ``PAIQ_ANONYMOUS_HEAVY_READS`` of them a second (a token bucket holding as many, so a second's
worth may come at once) and at most :data:`IN_FLIGHT` at a time; beyond that the answer is 429
TooManyRequestsError with ``Retry-After``. The handlers ask (:func:`heavy_read`) once the request is
valid and before they read what makes it heavy, so a refused request costs nothing and a request that is
refused for its parameters (400) costs nothing of the budget. A caller with a token is not limited here:
it is known, and its reads are its own (paging by cursor costs a page anyway).
"""

from __future__ import annotations

import math
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass

from aiohttp import web

from services.submit.deps import DEPS
from services.submit.errors import TooManyRequestsError
from services.submit.routes.access import optional_principal

LIGHT_JOBS = 100  # a first list page of at most this many jobs is not a heavy read
IN_FLIGHT = 2  # anonymous heavy reads answered at once, at most


def is_heavy_page(limit: int, offset: int) -> bool:
    """Whether a list page (valid already) is a heavy read when it comes without a token."""
    return offset > 0 or limit > LIGHT_JOBS


class HeavyReadsSpentError(TooManyRequestsError):
    """429 with the seconds to wait (``Retry-After``): the anonymous callers' budget is spent."""

    def __init__(self, wait_s: int, rate: float) -> None:
        super().__init__(f"without a token, everyone together may make {rate:g} heavy reads a second (a list page "
                         f"past the first {LIGHT_JOBS} jobs, a job's whole profile); try again in {wait_s} s, or send "
                         "a token (POST /api/v1/token)", wait_s)


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


HEAVY_READS = web.AppKey("heavy_reads", Budget)  # the anonymous callers' budget, all together


async def heavy_read_budget(app: web.Application) -> AsyncIterator[None]:
    """The app's budget (a ``cleanup_ctx``), from the settings."""
    app[HEAVY_READS] = Budget(app[DEPS].settings.anonymous_heavy_reads)
    yield


@asynccontextmanager
async def heavy_read(request: web.Request) -> AsyncIterator[None]:
    """Around what makes a request heavy: nothing for a caller with a valid token; for another, a read of
    the shared budget, or :class:`TooManyRequestsError` (429) when it is spent."""
    if await optional_principal(request) is not None:
        yield
        return
    budget = request.app[HEAVY_READS]
    wait = budget.take()
    if wait is not None:
        raise HeavyReadsSpentError(wait, budget.rate)
    try:
        yield
    finally:
        budget.done()
