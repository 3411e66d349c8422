"""Anonymous heavy reads: which requests they are, and the budget they share."""

from __future__ import annotations

import pytest

from services.submit.routes.throttle import IN_FLIGHT, LIGHT_JOBS, Budget, is_heavy_page

pytestmark = pytest.mark.unit

@pytest.mark.parametrize(("limit", "offset", "heavy"), [
    (1000, 0, True),  # OpenPAI's default page
    (LIGHT_JOBS, 0, False),
    (LIGHT_JOBS + 1, 0, True),
    (20, 1, True),
    (20, 0, False),  # a first page, or a cursor's page: a page
    (20, 50_000, True),
])
def test_heavy_pages_are_those_past_the_first_hundred_jobs(limit: int, offset: int, heavy: bool) -> None:
    assert is_heavy_page(limit, offset) is heavy


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_budget_gives_rate_reads_a_second_and_says_how_long_to_wait() -> None:
    clock = Clock()
    budget = Budget(2, clock=clock)
    assert budget.take() is None
    budget.done()
    assert budget.take() is None
    budget.done()
    assert budget.take() == 1  # both tokens spent: half a second to the next, said as one
    clock.now += 0.5
    assert budget.take() is None
    budget.done()
    clock.now += 100  # an idle while fills the bucket to its size, no more
    assert [budget.take() for _ in range(3)] == [None, None, 1]


def test_the_budget_holds_at_most_in_flight_reads_at_once() -> None:
    clock = Clock()
    budget = Budget(100, clock=clock)
    for _ in range(IN_FLIGHT):
        assert budget.take() is None
    assert budget.take() == 1
    budget.done()
    assert budget.take() is None


def test_a_slow_rate_says_the_whole_seconds_to_wait_and_zero_refuses_all() -> None:
    clock = Clock()
    budget = Budget(0.25, clock=clock)  # one read every four seconds
    assert budget.take() is None
    budget.done()
    assert budget.take() == 4
    clock.now += 3
    assert budget.take() == 1
    assert Budget(0, clock=clock).take() == 60
