"""``GET /api/v2/jobs?tagsNotContain=`` on the real MongoDB-wire server: where nearly every job holds the tag, a
request reads its budget of jobs and no more, so it takes the same time over three times the history, and its
cursors still reach the jobs without the tag."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from pymongo import AsyncMongoClient

from shared.db.lists.negative import without_tags
from shared.db.lists.paging import Cursor, JobPage
from shared.db.store import Store
from tests.conftest import mongo_server
from tests.infra import unique
from tests.integration.test_store_queries import history_of

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

BUDGET = 400


@pytest.fixture(scope="module")
async def store() -> AsyncIterator[Store]:
    async with mongo_server() as uri:
        client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(uri)
        store = Store(client, unique("negative_"))
        await store.ensure_indexes()
        yield store
        await client.close()


async def _page(store: Store, cursor: Cursor | None, repeat: int = 5) -> tuple[JobPage, int, float]:
    read = 0

    async def reader(limit: int, at: Cursor | None) -> JobPage:
        nonlocal read
        page = await store.list_jobs(limit=limit, cursor=at)
        read += len(page.jobs)
        return page

    best, page = float("inf"), JobPage([], None)
    for _ in range(repeat):
        read = 0
        start = time.perf_counter()
        page = await without_tags(reader, frozenset({"ci"}), limit=20, offset=0, cursor=cursor, budget=BUDGET)
        best = min(best, time.perf_counter() - start)
    return page, read, best


async def test_a_page_without_a_common_tag_costs_its_budget_whatever_the_history(store: Store) -> None:
    await store.insert_jobs(history_of(0, 1500))
    await store.jobs.update_many({}, {"$set": {"tags": ["ci"]}})
    await store.jobs.update_many({"name": {"$in": ["h0", "h700"]}}, {"$set": {"tags": []}})
    first, read, small = await _page(store, None)
    assert read == BUDGET and first.jobs == [] and first.next_cursor  # the newest 400 all hold ci
    await store.insert_jobs(history_of(1500, 4500))
    await store.jobs.update_many({"tags": {"$exists": False}}, {"$set": {"tags": ["ci"]}})
    _, read, big = await _page(store, None)
    print(f"tagsNotContain, budget {BUDGET}: {small * 1000:.1f} ms over 1,500 jobs, {big * 1000:.1f} ms over 4,500")
    assert read == BUDGET and big <= 1.5 * small + 0.01, f"{big * 1000:.1f} ms vs {small * 1000:.1f} ms"
    found: list[str] = []
    cursor: Cursor | None = None
    while True:
        page, read, _ = await _page(store, cursor, repeat=1)
        assert read <= BUDGET
        found += [j.name for j in page.jobs]
        if page.next_cursor is None:
            break
        cursor = Cursor.decode(page.next_cursor)
    assert found == ["h700", "h0"]
