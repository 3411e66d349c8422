"""The order in which the journal numbers what waits (shared.db.journal.numbering_order): as entries became
visible, each job's in the order of its changes whatever clocks stamped them."""

from __future__ import annotations

import pytest

from shared.db.journal import numbering_order

pytestmark = pytest.mark.unit


def e(eid: str, job: str, v: int, n: int, q: int) -> dict[str, object]:
    return {"_id": eid, "job": job, "v": v, "n": n, "q": q}


@pytest.mark.parametrize(("pending", "order"), [
    ([], []),
    ([e("a", "j1", 1, 0, 10)], ["a"]),
    # by the time they became visible
    ([e("b", "j2", 1, 0, 20), e("a", "j1", 1, 0, 10)], ["a", "b"]),
    # one job's changes in version order, though another writer's clock stamped the later one earlier
    ([e("late", "j1", 5, 0, 10), e("early", "j1", 4, 0, 30)], ["early", "late"]),
    # ... keeping the places the job's entries hold among others'
    ([e("x", "j2", 1, 0, 5), e("late", "j1", 5, 0, 10), e("y", "j2", 2, 0, 20), e("early", "j1", 4, 0, 30)],
     ["x", "early", "y", "late"]),
    # one change's events in their order
    ([e("second", "j1", 3, 1, 10), e("first", "j1", 3, 0, 10)], ["first", "second"]),
    # events about no job keep their time order
    ([e("n2", "", 0, 0, 20), e("n1", "", 0, 0, 10)], ["n1", "n2"]),
    # equal times: by id, so a replay numbers the same way
    ([e("b", "j2", 1, 0, 10), e("a", "j1", 1, 0, 10)], ["a", "b"]),
])
def test_numbering_order(pending: list[dict[str, object]], order: list[str]) -> None:
    assert [d["_id"] for d in numbering_order(pending)] == order
