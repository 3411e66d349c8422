"""The login guard's policy (services.submit.loginguard), with an injected clock: a few free failures per user
name and per client address, then windows that double up to a cap, refused tries that are not counted, a right
password that clears the user's count, failures forgotten after a while, and tables that stay bounded."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from services.submit.loginguard import ADDRESSES, USERS, LoginGuard, Policy, Refusal, struck

pytestmark = pytest.mark.unit


@dataclass
class Clock:
    now: float = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize(("failures", "window"), [
    (0, 0.0), (4, 0.0), (5, 1.0), (6, 2.0), (7, 4.0), (10, 32.0), (11, 60.0), (12, 60.0), (10**6, 60.0)])
def test_a_user_names_windows_double_after_five_free_failures_up_to_a_minute(failures: int, window: float) -> None:
    assert USERS.window_s(failures) == window


def test_an_address_has_more_free_failures_and_the_same_cap() -> None:
    assert [ADDRESSES.window_s(n) for n in (19, 20, 21)] == [0.0, 1.0, 2.0]
    assert ADDRESSES.window_s(10**6) == 60.0


def test_failures_are_forgotten_a_while_after_the_last() -> None:
    p = Policy(free=2, first_s=1, cap_s=8, forget_s=100)
    s = struck(struck(None, p, 0), p, 50)
    assert (s.failures, s.until_s) == (2, 51)
    assert struck(s, p, 150).failures == 3  # 100 s after the last: still counted
    assert struck(s, p, 151).failures == 1  # more: afresh


Step = tuple[float, str, str | None, str, Refusal | None]  # (time, user, address, outcome if let try, expected)
ALICE, BOB, HOME, CAFE = "alice", "bob", "10.0.0.1", "10.0.0.2"


def wrong(t: float, user: str = ALICE, address: str | None = HOME) -> Step:
    return (t, user, address, "wrong", None)


def right(t: float, user: str = ALICE, address: str | None = HOME) -> Step:
    return (t, user, address, "right", None)


def refused(t: float, wait: int, by: str = "user", user: str = ALICE, address: str | None = HOME) -> Step:
    return (t, user, address, "-", Refusal(wait, by))  # type: ignore[arg-type]


SCENARIOS: dict[str, list[Step]] = {
    "five wrong are free; the fifth opens a second's window, the right password waits it out too": [
        *(wrong(t) for t in range(5)), refused(4.2, 1), refused(4.9, 1),
        (4.9, ALICE, HOME, "right", Refusal(1, "user")), right(5.0), wrong(5.1), right(5.2)],
    "each failure past the free ones doubles the window; refused tries are not counted": [
        *(wrong(t) for t in range(5)), refused(4.5, 1), wrong(5), refused(5.1, 2), refused(6.5, 1), wrong(7),
        refused(7.5, 4), wrong(11), refused(11.1, 8)],
    "the user's window is capped at a minute": [
        *(wrong(t * 100.0) for t in range(5)), *(wrong(400 + 61.0 * k) for k in range(1, 12)),
        refused(400 + 61.0 * 11 + 0.5, 60)],
    "another user, from another address, is not held back": [
        *(wrong(t) for t in range(5)), refused(4.5, 1), right(4.5, BOB, CAFE), wrong(4.6, BOB, CAFE)],
    "another address of the same user is held back (the window is the user's)": [
        *(wrong(t) for t in range(5)), refused(4.5, 1, user=ALICE, address=CAFE)],
    "one address trying many names is held back after twenty failures, for any name": [
        *(wrong(t * 0.01, f"user{t}") for t in range(20)), refused(0.3, 1, "address", user=BOB),
        right(0.3, BOB, CAFE)],
    "a right password does not clear the address's count": [
        *(wrong(t * 0.01, f"user{t}") for t in range(19)), right(0.5), wrong(0.6, BOB), refused(0.7, 1, "address")],
    "failures fifteen minutes old are forgotten": [
        *(wrong(t) for t in range(4)), wrong(3 + 15 * 60 + 1), *(wrong(905 + t) for t in range(4)), refused(908.5, 1)],
    "without an address, only the user name counts": [
        *(wrong(t * 0.01, f"user{t}", None) for t in range(30)), right(0.5, BOB, None)],
}


@pytest.mark.parametrize("steps", SCENARIOS.values(), ids=SCENARIOS.keys())
def test_tries_are_let_through_or_refused_as_the_policy_says(steps: list[Step]) -> None:
    clock = Clock()
    guard = LoginGuard(clock)
    for t, user, address, outcome, expected in steps:
        clock.now = t
        got = guard.refusal(user, address)
        assert got == expected, (t, user, address, outcome)
        if got is None and outcome == "right":
            guard.succeeded(user)
        elif got is None and outcome == "wrong":
            guard.failed(user, address)


def test_only_an_answered_wrong_password_counts_so_right_ones_at_once_never_open_a_window() -> None:
    guard = LoginGuard(Clock())
    assert all(guard.refusal(ALICE, HOME) is None for _ in range(100))  # a burst of tries, all being checked
    for _ in range(100):
        guard.succeeded(ALICE)
    assert len(guard.users) == len(guard.addresses) == 0


def test_the_tables_keep_at_most_their_capacity_forgetting_the_least_recently_struck() -> None:
    clock = Clock()
    guard = LoginGuard(clock, capacity=3)
    for n in range(5):
        guard.failed(f"user{n}", f"10.0.0.{n}")
    assert len(guard.users) == len(guard.addresses) == 3
    guard = LoginGuard(clock, users=Policy(free=1, first_s=10, cap_s=10, forget_s=100), capacity=2)
    guard.failed(ALICE, None)
    assert guard.refusal(ALICE, None) == Refusal(10, "user")
    guard.failed("x", None)
    guard.failed("y", None)  # alice, least recently struck, is pushed out
    assert guard.refusal(ALICE, None) is None
