"""Anonymous heavy reads: which requests they are, and the budget they share."""

from __future__ import annotations

import pytest

from services.submit.throttle import IN_FLIGHT, LIGHT_JOBS, Budget, is_heavy

pytestmark = pytest.mark.unit

JOBS, USER_JOBS = "/api/v1/jobs", "/api/v1/user/{user}/jobs"


@pytest.mark.parametrize(("route", "query", "heavy"), [
    (JOBS, {}, True),  # OpenPAI's default page: 1,000 jobs
    (JOBS, {"limit": str(LIGHT_JOBS)}, False),
    (JOBS, {"limit": str(LIGHT_JOBS + 1)}, True),
    (JOBS, {"limit": "20", "offset": "1"}, True),
    (JOBS, {"limit": "20", "offset": "0"}, False),
    (JOBS, {"limit": "20", "cursor": "abc"}, False),  # a cursor page costs a page
    (USER_JOBS, {"limit": "20", "offset": "50000"}, True),
    (USER_JOBS, {"limit": "\u0661\u0660\u0660\u0660"}, False),  # refused (400) before anything is read
    (JOBS, {"limit": "20", "offset": "9" * 5000}, False),
    ("/api/v1/user/{user}/jobs/{job}/profile", {}, True),
    ("/api/v1/user/{user}/jobs/{job}", {}, False),
    ("/api/v1/virtual-clusters", {"limit": "5000"}, False),
])
def test_heavy_reads_are_lists_past_the_first_page_and_whole_profiles(route: str, query: dict[str, str],
                                                                      heavy: bool) -> None:
    assert is_heavy(route, query) is heavy


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
