"""The pure parts of ``GET /api/v2/jobs?order=``: v1.8's order names, the one total order each means (against a
plain sort), the cursor, which way serves each order with which filters, and the concatenation of value lists
across page boundaries (with fake value lists, sized or not)."""

from __future__ import annotations

import random

import pytest

from shared.db.listorder import Asked, concatenated, deep_ok, way_of
from shared.db.lists.orders import ALL, Order, OrderCursor, OrderError, Value
from shared.db.lists.paging import Cursor, CursorError, JobPage, JobSummary

FIELDS = {"jobName": "name", "username": "user", "vc": "virtual_cluster", "totalTaskNumber": "task_count",
          "totalGpuNumber": "gpu_count", "completionTime": "completed_ms", "jobPriority": "job_priority",
          "retries": "retries", "state": "state"}


def summaries(n: int, seed: int = 1) -> list[JobSummary]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        ended = rng.random() < 0.8
        created = 1_000_000 + rng.randrange(50) * 1000  # many ties of creation time
        out.append(JobSummary.model_validate({
            "_id": f"u{i % 4}~j{i}~{rng.randrange(1 << 16):04x}", "user": f"u{i % 4}", "name": rng.choice("abcAB_"),
            "virtual_cluster": rng.choice(("default", "vision")),
            "state": rng.choice(("SUCCEEDED", "FAILED", "STOPPED")) if ended else rng.choice(("RUNNING", "WAITING")),
            "retries": rng.choice((0, 0, 1, 3)), "created_ms": created, "task_count": rng.randrange(1, 4),
            "gpu_count": rng.choice((0, 2, 8)), "completed_ms": created + rng.randrange(9) * 500 if ended else None,
            "job_priority": rng.choice((None, "prod", "test"))}))
    return out


def plain_sort(jobs: list[JobSummary], name: str, descending: bool) -> list[str]:
    newest = sorted(jobs, key=lambda j: (-j.created_ms, j.id))
    if name == "submissionTime":
        return [j.id for j in (newest if descending else newest[::-1])]
    field = FIELDS[name]
    have = [j for j in newest if getattr(j, field) is not None]
    none = [j for j in newest if getattr(j, field) is None]
    have = sorted(have, key=lambda j: getattr(j, field), reverse=descending)  # stable: ties stay newest first
    return [j.id for j in (none + have if descending else have + none)]


@pytest.mark.parametrize("text", ALL)
def test_each_order_is_the_plain_sort_it_names(text: str) -> None:
    order = Order.parse(text)
    jobs = summaries(300)
    assert [j.id for j in order.sort(jobs)] == plain_sort(jobs, order.name, order.descending)
    assert order.text == text and order.is_default == (text == "submissionTime,DESC")


@pytest.mark.parametrize("text", ["jobName", "jobName,asc", "name,ASC", "jobName,ASC,x", ",DESC", "state,DOWN"])
def test_an_order_v1_8_did_not_take_is_refused_naming_the_choices(text: str) -> None:
    with pytest.raises(OrderError, match="order: one of jobName, submissionTime, username"):
        Order.parse(text)


def test_no_order_is_newest_first() -> None:
    assert Order.parse(None).is_default and Order.parse("").is_default


@pytest.mark.parametrize("value", [None, 3, "prod", "SUCCEEDED"])
def test_a_cursor_round_trips_for_its_order_only(value: Value) -> None:
    order = Order.parse("jobPriority,DESC")
    cursor = OrderCursor(order.text, value, 1_790_000_000_123, "alice~x~1")
    assert OrderCursor.decode(cursor.encode(), order) == cursor
    with pytest.raises(CursorError, match="not a cursor of order=jobPriority,ASC"):
        OrderCursor.decode(cursor.encode(), Order.parse("jobPriority,ASC"))
    with pytest.raises(CursorError):
        OrderCursor.decode(Cursor(1, "a").encode(), order)  # a newest-first cursor is not one of an order
    with pytest.raises(CursorError):
        OrderCursor.decode("!!", order)


def test_after_a_cursor_come_exactly_the_jobs_sorted_after_its_job() -> None:
    jobs = summaries(120, seed=5)
    for text in ALL:
        order = Order.parse(text)
        ranked = order.sort(jobs)
        at = OrderCursor.after(order, ranked[40])
        assert [j.id for j in ranked if order.rank_of(j) > at.rank(order)] == [j.id for j in ranked[41:]], text


ONE = ((None, None, None),)


@pytest.mark.parametrize(("text", "asked", "way", "deep"), [
    ("submissionTime,ASC", Asked(ONE), "mirror", True),
    ("submissionTime,ASC", Asked((("u1", "FAILED", None),)), "mirror", True),
    ("submissionTime,ASC", Asked(((None, None, "vision"),)), "sorted", True),
    ("submissionTime,ASC", Asked(ONE, keyword="mn"), "sorted", True),
    ("state,DESC", Asked(ONE), "values", True),
    ("state,ASC", Asked((("u1", "FAILED", None), ("u1", "RUNNING", None))), "values", True),
    ("state,ASC", Asked((("u1", None, None), ("u2", None, None))), "sorted", True),
    ("state,ASC", Asked(((None, None, "vision"),)), "values", False),
    ("state,ASC", Asked(ONE, without=frozenset({"t"})), "sorted", True),
    ("username,ASC", Asked(ONE), "values", True),
    ("username,ASC", Asked(((None, None, "vision"),)), "sorted", True),
    ("username,ASC", Asked((("u1", None, "vision"), ("u2", None, "vision"))), "values", False),
    ("vc,DESC", Asked(ONE), "values", False),
    ("vc,DESC", Asked((("u1", None, None),)), "values", False),
    ("retries,ASC", Asked(ONE), "values", False),
    ("totalGpuNumber,DESC", Asked((("u1", None, None),)), "sorted", True),
    ("jobPriority,ASC", Asked(ONE, tags=("x",)), "sorted", True),
    ("completionTime,DESC", Asked(ONE), "completion", False),
    ("completionTime,DESC", Asked(((None, "FAILED", None),)), "sorted", True),
    ("jobName,ASC", Asked(ONE), "sorted", True),
])
def test_which_way_serves_each_order_with_which_filters(text: str, asked: Asked, way: str, deep: bool) -> None:
    order = Order.parse(text)
    assert way_of(order, asked) == way
    assert deep_ok(order, asked, way, None) == deep


class Lists:
    """Fake value lists: each value's jobs newest first, read as the store's pages are (limit, offset, cursor)."""

    def __init__(self, jobs: list[JobSummary], order: Order, sized: bool) -> None:
        self.order, self.sized, self.reads = order, sized, 0
        self.by_value: dict[Value, list[JobSummary]] = {}
        for j in sorted(jobs, key=lambda j: (-j.created_ms, j.id)):
            self.by_value.setdefault(order.value_of(j), []).append(j)

    async def read(self, value: Value, limit: int, offset: int, at: Cursor | None, holds: int | None) -> JobPage:
        self.reads += 1
        assert holds is None or holds == len(self.by_value.get(value, []))
        jobs = self.by_value.get(value, [])
        if at is not None:
            jobs = [j for j in jobs if (-j.created_ms, j.id) > (-at.created_ms, at.job_id)]
        page = jobs[offset:offset + limit]
        more = len(jobs) > offset + limit and bool(page)
        return JobPage(page, Cursor(page[-1].created_ms, page[-1].id).encode() if more else None)

    async def size(self, value: Value) -> int | None:
        return len(self.by_value.get(value, [])) if self.sized else None


@pytest.mark.parametrize("sized", [True, False])
@pytest.mark.parametrize("text", ["state,ASC", "state,DESC", "retries,DESC", "jobPriority,ASC", "username,DESC"])
@pytest.mark.parametrize("limit", [1, 7, 50])
async def test_value_lists_one_after_another_page_as_the_sort(text: str, sized: bool, limit: int) -> None:
    order = Order.parse(text)
    jobs = summaries(90, seed=3)
    lists = Lists(jobs, order, sized)
    values = order.values_in_order(set(lists.by_value) | {99 if order.field == "retries" else "nobody"})
    want = [j.id for j in order.sort(jobs)]
    by_offset: list[str] = []
    while True:
        page, more = await concatenated(order, values, lists.size, lists.read, limit=limit, offset=len(by_offset),
                                        cursor=None)
        by_offset += [j.id for j in page]
        assert more == (len(by_offset) < len(want)), len(by_offset)
        if not more:
            break
    assert by_offset == want
    by_cursor: list[str] = []
    cursor: OrderCursor | None = None
    while True:
        page, more = await concatenated(order, values, lists.size, lists.read, limit=limit, offset=0, cursor=cursor)
        by_cursor += [j.id for j in page]
        if not more:
            break
        cursor = OrderCursor.after(order, page[-1])
    assert by_cursor == want


async def test_a_known_size_skips_a_whole_value_without_reading_it() -> None:
    order = Order.parse("state,ASC")
    jobs = summaries(90, seed=3)
    lists = Lists(jobs, order, sized=True)
    values = order.values_in_order(set(lists.by_value))
    page, _ = await concatenated(order, values, lists.size, lists.read, limit=5, offset=len(jobs) - 5, cursor=None)
    last = order.sort(jobs)[-5:]
    assert [j.id for j in page] == [j.id for j in last]
    assert lists.reads == len({order.value_of(j) for j in last}), "only the lists the page spans were read"
