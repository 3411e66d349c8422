"""Which try may start now: each endpoint's standing, and the tries in flight by endpoint, owner and share. Pure.

An endpoint (the SMTP server, a webhook's URL) stands in one of three ways, as its tries have gone in this
process:

- **new**: never heard to answer (made since the process started, or not yet tried by it). One try at a time
  until it answers, from the pool, where new endpoints' tries together take at most ``NEW_SHARE`` of it and one
  owner's at most ``NEW_PER_OWNER`` of that: an endpoint that never answers holds one slot of the new share
  until its try times out (then it is failing), so many new dead webhooks hold a bounded part of the pool,
  one user's a bounded part of that, and healthy endpoints, and other users' new ones, keep the rest.
- **healthy**: it answered once, and its last try did not fail: ``PAIQ_NOTIFY_ENDPOINT_CONCURRENCY`` tries at
  once (the SMTP server ``SMTP_PARALLEL``) from the pool, ``PAIQ_NOTIFY_CONCURRENCY``.
- **failing**: its last try failed (a webhook's timeout, refused connection or error status; the SMTP server
  unreachable, not its refusal of one address). One try at a time, from a reserve of their own besides the
  pool (``FAILING_SHARE`` of it), until a try succeeds.

An answer is what the endpoint said: a success, an HTTP status, an SMTP reply. A timeout, a refused or cut-off
connection is no answer; a try that sent nothing (the webhook deleted meanwhile, a destination refused before
connecting) says nothing of the endpoint.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from enum import StrEnum
from typing import TypeVar

from shared.notify.endpoints import SMTP_LINE

FAILING_SHARE = 4  # failing endpoints' reserve: a quarter of PAIQ_NOTIFY_CONCURRENCY (at least 2), besides it
NEW_SHARE = 2  # new endpoints' tries together: at most half of PAIQ_NOTIFY_CONCURRENCY (at least 1), inside it
NEW_PER_OWNER = 8  # one owner's new endpoints' tries together: an eighth of the new share (at least 1)
KEPT = 10_000  # endpoints remembered as failing, or as having answered (forgotten all at once past it)

K = TypeVar("K", bound=str)


class Standing(StrEnum):
    NEW = "new"
    HEALTHY = "healthy"
    FAILING = "failing"


class Reply(StrEnum):
    """What a try heard of its endpoint."""

    ANSWERED = "answered"  # accepted, or refused with an answer (an HTTP status, an SMTP reply)
    SILENT = "silent"  # no answer: a timeout, a refused or cut-off connection
    UNTRIED = "untried"  # nothing was sent: the endpoint said nothing


@dataclass(frozen=True)
class Limits:
    pool: int  # PAIQ_NOTIFY_CONCURRENCY
    endpoint: int  # PAIQ_NOTIFY_ENDPOINT_CONCURRENCY: a healthy webhook's tries at once
    smtp: int  # the healthy SMTP server's

    @property
    def new_share(self) -> int:
        return max(1, self.pool // NEW_SHARE)

    @property
    def new_per_owner(self) -> int:
        return max(1, self.new_share // NEW_PER_OWNER)

    @property
    def failing_reserve(self) -> int:
        return max(2, self.pool // FAILING_SHARE)


@dataclass(frozen=True)
class Ticket:
    """A started try: what it holds until :meth:`Admission.end`."""

    endpoint: str
    owner: str
    standing: Standing


class Admission:
    """The endpoints' standing and the tries in flight, counted where each was admitted."""

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self._answered: set[str] = set()
        self._failing: set[str] = set()
        self._at: Counter[str] = Counter()  # tries in flight by endpoint
        self._new_of: Counter[str] = Counter()  # new endpoints' tries in flight by owner
        self._in: Counter[Standing] = Counter()  # tries in flight by the standing they were admitted under

    def standing(self, endpoint: str) -> Standing:
        if endpoint in self._failing:
            return Standing.FAILING
        return Standing.HEALTHY if endpoint in self._answered else Standing.NEW

    def in_flight(self, endpoint: str) -> int:
        return self._at[endpoint]

    def admits(self, endpoint: str, owner: str) -> bool:
        """Whether a try of ``owner``'s delivery to ``endpoint`` may start now."""
        standing, limits, here = self.standing(endpoint), self.limits, self._at[endpoint]
        if standing is Standing.FAILING:
            return here < 1 and self._in[Standing.FAILING] < limits.failing_reserve
        pool_free = self._in[Standing.HEALTHY] + self._in[Standing.NEW] < limits.pool
        if standing is Standing.NEW:
            return (here < 1 and pool_free and self._in[Standing.NEW] < limits.new_share
                    and self._new_of[owner] < limits.new_per_owner)
        return pool_free and here < (limits.smtp if endpoint == SMTP_LINE else limits.endpoint)

    def start(self, endpoint: str, owner: str) -> Ticket:
        """Count a try that :meth:`admits` let start."""
        ticket = Ticket(endpoint=endpoint, owner=owner, standing=self.standing(endpoint))
        self._at[endpoint] += 1
        self._in[ticket.standing] += 1
        if ticket.standing is Standing.NEW:
            self._new_of[owner] += 1
        return ticket

    def end(self, ticket: Ticket, *, sent: bool, reply: Reply) -> None:
        """A try ended: its places given back, and its endpoint's standing as the try found it."""
        _drop(self._at, ticket.endpoint)
        _drop(self._in, ticket.standing)
        if ticket.standing is Standing.NEW:
            _drop(self._new_of, ticket.owner)
        if reply is Reply.UNTRIED:
            return
        if reply is Reply.ANSWERED:
            _remember(self._answered, ticket.endpoint)
        if sent:
            self._failing.discard(ticket.endpoint)
        elif reply is Reply.SILENT or ticket.endpoint != SMTP_LINE:  # the SMTP server refusing one address: fine
            _remember(self._failing, ticket.endpoint)


def _drop(counter: Counter[K], key: K) -> None:
    counter[key] -= 1
    if counter[key] <= 0:
        del counter[key]


def _remember(endpoints: set[str], endpoint: str) -> None:
    if endpoint not in endpoints and len(endpoints) >= KEPT:
        endpoints.clear()
    endpoints.add(endpoint)
