"""``GET /api/v2/jobs?order=`` on the real MongoDB-wire server: every order v1.8 took, both directions, with the
list's filters, paged by offset and by cursor across page boundaries, is the same list as a plain Python sort of
the same jobs (the field in the direction asked, nulls last ascending and first descending, then newest first);
the values an order visits are counted as jobs end and are deleted; a list no index serves in an order and that
is too long to sort is refused, saying why."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator
from typing import Any

import pytest
from pymongo import AsyncMongoClient

from shared.db import listorder
from shared.db.listorder import Asked, OrderRefusedError, ordered_page
from shared.db.lists.orders import ALL, Order, OrderCursor
from shared.db.lists.paging import JobSummary
from shared.db.store import Store
from shared.records import JobRecord, JobState, initial_tasks, now_ms
from tests.conftest import mongo_server
from tests.infra import unique
from tests.unit.factories import make_config, role_dict

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

DAY_MS = 86_400_000
BASE = now_ms() - 10 * DAY_MS
ENDED = (JobState.SUCCEEDED, JobState.SUCCEEDED, JobState.FAILED, JobState.STOPPED)
NAMES = ("train", "eval", "Train-mnist", "bert_ft", "a", "zeta")


def a_job(i: int, rng: random.Random, *, active: bool = False) -> JobRecord:
    tasks, gpus = 1 + rng.randrange(4), rng.choice((0, 0, 1, 2, 4))
    prio = rng.choice((None, None, "prod", "test"))
    name = f"{rng.choice(NAMES)}-{i}"
    extras: dict[str, Any] = {"extras": {"hivedScheduler": {"jobPriorityClass": prio}}} if prio else {}
    config = make_config(role_dict("main", taskNumber=tasks, gpuNumber=gpus), jobName=name, **extras)
    created = BASE + rng.randrange(10 * DAY_MS) if i % 9 else BASE + 5 * DAY_MS  # every ninth: the same ms
    state = rng.choice((JobState.RUNNING, JobState.WAITING)) if active else rng.choice(ENDED)
    return JobRecord(id=f"u{i % 5}~{name}~{i:08x}", user=f"u{i % 5}", name=name,
                     virtual_cluster="vision" if i % 3 == 0 else "default", config=config, raw_config={},
                     created_ms=created, state=state, sub_state="running" if active else "completed",
                     completed_ms=None if active else created + rng.randrange(3_600_000) if i % 7 else BASE + DAY_MS,
                     retries=rng.choice((0, 0, 0, 1, 2)), tasks=initial_tasks(config))


@pytest.fixture(scope="module")
async def store() -> AsyncIterator[tuple[Store, list[JobRecord], set[str]]]:
    async with mongo_server() as uri:
        client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(uri)
        store = Store(client, unique("order_"))
        await store.ensure_indexes()
        rng = random.Random(27)
        history = [a_job(i, rng) for i in range(240)]
        await store.insert_jobs(history[:200])
        for job in history[200:]:  # ended, counted one at a time as the status service does
            await store.insert_job(job)
            await store.tallies.add(job.virtual_cluster, job.state.value, job.id)
            assert await store.list_counts.count(job.id, job.created_ms, job.user, job.state.value, atomic=False)
        active = [a_job(i, rng, active=True) for i in range(240, 260)]
        for job in active:
            await store.insert_job(job)
        tagged = {job.id for job in history + active if rng.random() < 0.3}
        for job_id in tagged:
            await store.add_tag(job_id, "t")
        yield store, history + active, tagged
        await client.close()


Stored = tuple[Store, list[JobRecord], set[str]]


def expected(jobs: list[JobRecord], tagged: set[str], order: Order, asked: Asked) -> list[str]:
    """A plain sort: newest first, then (stable) the field in the order's direction with its nulls placed."""
    def keep(j: JobRecord) -> bool:
        combos = any(u in (None, j.user) and s in (None, j.state.value) and v in (None, j.virtual_cluster)
                     for u, s, v in asked.combos)
        words = [j.name.lower()] + [w.lower() for w in j.name.replace("-", " ").replace("_", " ").split()]
        return combos and (asked.keyword is None or any(w.startswith(asked.keyword) for w in words)) and (
            not asked.tags or j.id in tagged) and (not asked.without or j.id not in tagged)

    kept = sorted((j for j in jobs if keep(j)), key=lambda j: (-j.created_ms, j.id))
    if order.name == "submissionTime":
        return [j.id for j in (kept if order.descending else list(reversed(kept)))]
    field = {"jobName": "name", "username": "user", "vc": "virtual_cluster", "totalTaskNumber": "task_count",
             "totalGpuNumber": "gpu_count", "completionTime": "completed_ms", "jobPriority": "job_priority"
             }.get(order.name, order.name)

    def value(j: JobRecord) -> Any:
        if field == "task_count":
            return j.config.total_tasks
        if field == "gpu_count":
            return j.config.total_gpus
        if field == "job_priority":
            return (j.config.extras.get("hivedScheduler") or {}).get("jobPriorityClass")
        v = getattr(j, field)
        return v.value if isinstance(v, JobState) else v

    present = sorted((j for j in kept if value(j) is not None), key=value, reverse=order.descending)
    missing = [j for j in kept if value(j) is None]
    return [j.id for j in (missing + present if order.descending else present + missing)]


FILTERS: dict[str, Asked] = {
    "none": Asked(((None, None, None),)),
    "user": Asked((("u1", None, None),)),
    "state": Asked(((None, "FAILED", None),)),
    "vc": Asked(((None, None, "vision"),)),
    "user+state": Asked((("u2", "SUCCEEDED", None),)),
    "vc+user": Asked((("u3", None, "vision"),)),
    "users": Asked((("u1", None, None), ("u4", None, None))),
    "states": Asked(((None, "RUNNING", None), (None, "STOPPED", None))),
    "keyword": Asked(((None, None, None),), keyword="train"),
    "tags": Asked(((None, None, None),), tags=("t",)),
    "without": Asked(((None, None, None),), without=frozenset({"t"})),
}


async def _by_offsets(store: Store, order: Order, asked: Asked, limit: int) -> list[JobSummary]:
    out: list[JobSummary] = []
    while True:
        page = await ordered_page(store, order, asked, limit=limit, offset=len(out), cursor=None)
        out += page.jobs
        if page.next_cursor is None:
            assert len(page.jobs) <= limit
            return out
        assert len(page.jobs) == limit, (order.text, len(out))


async def _by_cursors(store: Store, order: Order, asked: Asked, limit: int) -> list[JobSummary]:
    out: list[JobSummary] = []
    cursor: OrderCursor | None = None
    while True:
        page = await ordered_page(store, order, asked, limit=limit, offset=0, cursor=cursor)
        out += page.jobs
        if page.next_cursor is None:
            return out
        cursor = OrderCursor.decode(page.next_cursor, order)


def order_filter_pairs() -> list[tuple[str, str]]:
    """Every order unfiltered, and with two of the other filter sets each, in turn, so that every filter set
    meets four orders of different fields (the whole table, 20 x 11, is the pure test's: tests/unit/
    test_v2_list_order.py; on the real server it took three minutes)."""
    others = [f for f in FILTERS if f != "none"]
    return [(text, "none") for text in ALL] + [
        (text, others[(2 * k + j) % len(others)]) for k, text in enumerate(ALL) for j in (0, 1)]


@pytest.mark.parametrize(("text", "filters"), order_filter_pairs())
async def test_every_order_pages_as_a_plain_sort_of_the_same_jobs(store: Stored, text: str, filters: str) -> None:
    db, jobs, tagged = store
    order, asked = Order.parse(text), FILTERS[filters]
    want = expected(jobs, tagged, order, asked)
    limit = 23 if filters == "none" else 9
    assert [j.id for j in await _by_offsets(db, order, asked, limit)] == want, "by offset"
    assert [j.id for j in await _by_cursors(db, order, asked, limit)] == want, "by cursor"


@pytest.mark.parametrize("text", ["state,DESC", "username,ASC", "submissionTime,ASC", "retries,DESC",
                                  "totalGpuNumber,ASC", "jobPriority,DESC", "completionTime,DESC", "vc,ASC"])
async def test_a_page_at_an_offset_is_that_slice_of_the_sort(store: Stored, text: str) -> None:
    db, jobs, tagged = store
    order, asked = Order.parse(text), FILTERS["none"]
    want = expected(jobs, tagged, order, asked)
    for offset in (0, 1, 101, 150, 237, 259, 260, 400):
        page = await ordered_page(db, order, asked, limit=20, offset=offset, cursor=None)
        assert [j.id for j in page.jobs] == want[offset:offset + 20], offset
        assert (page.next_cursor is not None) == (offset + 20 < len(want)), offset


async def test_a_list_too_long_to_sort_is_refused_saying_why(store: Stored, monkeypatch: pytest.MonkeyPatch) -> None:
    db, _, _ = store
    monkeypatch.setattr(listorder, "MAX_SORTED", 30)
    with pytest.raises(OrderRefusedError, match=r"order=jobName,ASC with these filters: no index holds"):
        await ordered_page(db, Order.parse("jobName,ASC"), FILTERS["none"], limit=10, offset=0, cursor=None)
    with pytest.raises(OrderRefusedError, match="at most 30 jobs"):  # refused after reading at most 31
        await ordered_page(db, Order.parse("retries,ASC"), FILTERS["keyword"], limit=10, offset=0, cursor=None)
    small = await ordered_page(db, Order.parse("jobName,DESC"), FILTERS["vc+user"], limit=10, offset=0, cursor=None)
    assert small.way == "sorted" and small.jobs
    with pytest.raises(OrderRefusedError, match="offset \\+ limit: at most 10000 with order=retries,ASC"):
        await ordered_page(db, Order.parse("retries,ASC"), FILTERS["none"], limit=20, offset=9990, cursor=None)
    deep = await ordered_page(db, Order.parse("state,ASC"), FILTERS["user"], limit=20, offset=50_000, cursor=None)
    assert deep.jobs == [] and deep.next_cursor is None


async def test_the_values_an_order_visits_are_counted_once_and_uncounted_when_deleted(store: Stored) -> None:
    db, jobs, _ = store
    ended = [j for j in jobs if j.state.is_final]
    for field in ("retries", "gpu_count"):
        want: dict[Any, int] = {}
        for j in ended:
            value = j.retries if field == "retries" else j.config.total_gpus
            want[value] = want.get(value, 0) + 1
        assert await db.list_counts.values(field) == want
    gone = ended[-1]
    assert not await db.list_counts.count(gone.id, gone.created_ms, gone.user, gone.state.value, atomic=False)
    assert await db.delete_job(gone.id)
    after = await db.list_counts.values("retries")
    assert sum(after.values()) == len(ended) - 1 and after.get(gone.retries, 0) == sum(
        1 for j in ended[:-1] if j.retries == gone.retries)
    jobs.remove(gone)


async def test_a_history_stored_before_the_values_is_counted_once_at_start(mongo_uri: str) -> None:
    """A database of schema version 4 has the deep pages' counts but not the values: they are counted once."""
    client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(mongo_uri)
    db = Store(client, unique("values_"))
    await db.ensure_indexes()
    rng = random.Random(4)
    jobs = [a_job(i, rng) for i in range(60)]
    await db.insert_jobs(jobs)
    want = await db.list_counts.values("gpu_count")
    await db.list_counts.col.delete_many({"_id": {"$gte": "V|", "$lt": "V}"}})
    buckets = await db.list_counts.col.count_documents({})
    await db.meta.update_one({"_id": "schema"}, {"$set": {"version": 4}})
    await db.ensure_indexes()
    assert await db.list_counts.values("gpu_count") == want and sum(want.values()) == 60
    assert await db.list_counts.col.count_documents({"_id": {"$lt": "V|"}}) == buckets, "the other counts kept"
    page = await ordered_page(db, Order.parse("totalGpuNumber,DESC"), FILTERS["none"], limit=60, offset=0, cursor=None)
    assert [j.id for j in page.jobs] == expected(jobs, set(), Order.parse("totalGpuNumber,DESC"), FILTERS["none"])
    await client.close()
