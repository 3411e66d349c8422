"""Which try may start: an endpoint's standing as its tries went (new until it answers, healthy, failing), and
the shares each standing draws from (shared.notify.admission)."""

from __future__ import annotations

import pytest

from shared.notify.admission import Admission, Limits, Reply, Standing
from shared.notify.endpoints import SMTP_LINE

pytestmark = pytest.mark.unit

LIMITS = Limits(pool=8, endpoint=2, smtp=8)  # new share 4, one owner's 1, failing reserve 2


def _admission(answered: tuple[str, ...] = (), failing: tuple[str, ...] = ()) -> Admission:
    """An admission that has heard ``answered`` answer and ``failing`` fail (silent), nothing in flight."""
    a = Admission(LIMITS)
    for endpoint in answered:
        a.end(a.start(endpoint, "setup"), sent=True, reply=Reply.ANSWERED)
    for endpoint in failing:
        a.end(a.start(endpoint, "setup"), sent=False, reply=Reply.SILENT)
    return a


def _fill(a: Admission, tries: list[tuple[str, str]]) -> int:
    """Start each (endpoint, owner) try the admission admits; how many started."""
    started = 0
    for endpoint, owner in tries:
        if a.admits(endpoint, owner):
            a.start(endpoint, owner)
            started += 1
    return started


def test_shares() -> None:
    assert (LIMITS.new_share, LIMITS.new_per_owner, LIMITS.failing_reserve) == (4, 1, 2)
    assert (Limits(pool=64, endpoint=2, smtp=8).new_share, Limits(pool=64, endpoint=2, smtp=8).new_per_owner) == (32, 4)
    assert Limits(pool=1, endpoint=2, smtp=8).new_share == 1


@pytest.mark.parametrize(("tries", "started"), [
    # a new endpoint: one try until it answers, whatever its line holds
    ([("new", "a")] * 3, 1),
    # a healthy one: its line's limit (the SMTP server's, a webhook's)
    ([("ok", "a")] * 3, 2),
    ([(SMTP_LINE, "a")] * 9, 8),
    # a failing one: one at a time
    ([("dead", "a")] * 3, 1),
    # one owner's new endpoints: one try between them; many owners': the new share (4 of the pool of 8)
    ([(f"new{i}", "a") for i in range(5)], 1),
    ([(f"new{i}", f"u{i}") for i in range(6)], 4),
    # failing endpoints: their reserve (2), besides the pool
    ([(f"dead{i}", "a") for i in range(4)], 2),
])
def test_what_starts(tries: list[tuple[str, str]], started: int) -> None:
    a = _admission(answered=("ok", SMTP_LINE), failing=("dead", *(f"dead{i}" for i in range(4))))
    assert _fill(a, tries) == started


def test_new_dead_endpoints_leave_the_pool_to_healthy_ones_and_other_owners() -> None:
    """The tester's scenario: two users' many new endpoints that never answer, then healthy messages."""
    a = _admission(answered=("ok",))
    dead = [(f"hang-{user}-{i}", user) for user in ("bad1", "bad2") for i in range(20)]
    assert _fill(a, dead) == 2  # one each: their owners' share of new tries
    assert _fill(a, [(f"hang-bad3-{i}", "bad3") for i in range(20)]) == 1
    assert _fill(a, [("fresh", "carol")]) == 1  # a new healthy endpoint of another owner: at once
    assert _fill(a, [("ok", "bob")] * 2 + [("ok2", "bob")]) == 2  # a known one: its line's limit, at once
    assert _fill(a, [(f"hang-bad{n}-x", f"bad{n}") for n in range(4, 9)]) == 0  # the new share (4) is full
    assert _fill(a, [("ok", "bob")]) == 0  # ... and "ok" has its two


def test_standing_follows_what_the_endpoint_said() -> None:
    a = Admission(LIMITS)
    assert a.standing("w") is Standing.NEW
    a.end(a.start("w", "a"), sent=False, reply=Reply.UNTRIED)  # nothing sent (a refused destination): still new
    assert a.standing("w") is Standing.NEW
    a.end(a.start("w", "a"), sent=False, reply=Reply.SILENT)  # a timeout: failing, and never answered
    assert a.standing("w") is Standing.FAILING
    a.end(a.start("w", "a"), sent=False, reply=Reply.ANSWERED)  # a 500: answered, still failing
    assert a.standing("w") is Standing.FAILING
    a.end(a.start("w", "a"), sent=True, reply=Reply.ANSWERED)
    assert a.standing("w") is Standing.HEALTHY
    a.end(a.start("w", "a"), sent=False, reply=Reply.ANSWERED)  # a 4xx: failing again
    assert a.standing("w") is Standing.FAILING
    a.end(a.start(SMTP_LINE, "a"), sent=False, reply=Reply.ANSWERED)  # an address refused: the server answered
    assert a.standing(SMTP_LINE) is Standing.HEALTHY
    a.end(a.start(SMTP_LINE, "a"), sent=False, reply=Reply.SILENT)  # the server unreachable
    assert a.standing(SMTP_LINE) is Standing.FAILING


def test_a_try_gives_back_where_it_was_counted() -> None:
    """A new endpoint's try, still out when another answer made the endpoint healthy, gives back its new place."""
    a = Admission(LIMITS)
    first = a.start("w", "a")
    a.end(a.start("other", "b"), sent=True, reply=Reply.ANSWERED)
    a.end(first, sent=True, reply=Reply.ANSWERED)
    assert a.in_flight("w") == 0 and _fill(a, [(f"n{i}", f"u{i}") for i in range(5)]) == 4
