"""Expired records (shared.db.expiry) on a real server: removed by closed windows of their index, a batch at most
per delete, a backlog over several calls, nothing unexpired, and no TTL index left for the server's monitor to
scan collections with."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pymongo import ASCENDING
from pymongo.asynchronous.collection import AsyncCollection

from shared.db import expiry
from shared.db.expiry import next_window
from shared.db.store import Store, open_store
from tests.infra import unique

NOW = datetime(2026, 11, 28, 12, 0, tzinfo=UTC)
NOW_MS = int(NOW.timestamp() * 1000)


@pytest.fixture
async def store(mongo_uri: str) -> AsyncIterator[Store]:
    async with open_store(mongo_uri, unique("expiry_")) as s:
        yield s


def counted_deletes(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many records each ``delete_many`` of the real collections removed, in order, while the test runs."""
    deletes: list[int] = []
    real_delete = AsyncCollection.delete_many

    async def counted(self: AsyncCollection[Any], query: dict[str, object], *args: Any, **kwargs: Any) -> Any:
        result = await real_delete(self, query, *args, **kwargs)
        deletes.append(result.deleted_count)
        return result

    monkeypatch.setattr(AsyncCollection, "delete_many", counted)
    return deletes


async def test_a_backlog_goes_a_batch_at_a_time_over_several_calls_and_nothing_unexpired_goes(
        store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    deliveries = store.notifications.deliveries
    # 3,000 deliveries that expired over the last 3 hours (one every 3.6 s), 200 still to expire
    expired = [{"_id": f"old-{i}", "expires_at": NOW - timedelta(seconds=3.6 * (i + 1))} for i in range(3000)]
    alive = [{"_id": f"new-{i}", "expires_at": NOW + timedelta(seconds=i + 1)} for i in range(200)]
    await deliveries.insert_many(expired + alive)
    # where the last purge stopped: 3 hours ago (a platform that was down that long)
    await store.meta.insert_one({"_id": "expiry:notify_deliveries", "to": NOW - timedelta(hours=3, seconds=10)})
    monkeypatch.setattr(expiry, "BATCH", 100)
    monkeypatch.setattr(expiry, "CALL_BUDGET_SECONDS", 0.3)
    deletes = counted_deletes(monkeypatch)
    calls = []
    for _ in range(200):
        calls.append(await store.notifications.purge(NOW_MS))
        if not calls[-1] and not await deliveries.count_documents({"_id": {"$regex": "^old-"}}):
            break
    assert await deliveries.count_documents({}) == 200, "every expired delivery went, none of the others"
    assert max(deletes) <= 100, f"no delete removed more than a batch: {deletes}"
    assert len([c for c in calls if c]) >= 2, f"the backlog went over several calls, not one: {calls}"
    position = await store.meta.find_one({"_id": "expiry:notify_deliveries"})
    assert position is not None and position["to"].replace(tzinfo=UTC) == NOW, "it stopped at now, not past it"


async def test_records_keep_their_time_after_their_field_and_the_first_purge_starts_at_the_oldest(
        store: Store) -> None:
    keep = timedelta(days=1)
    idem = store.idempotency
    await idem.insert_many([
        {"_id": "days-past", "created_at": NOW - keep - timedelta(days=3)},  # a paiq up stopped for days
        {"_id": "minutes-past", "created_at": NOW - keep - timedelta(minutes=5)},
        {"_id": "kept", "created_at": NOW - keep + timedelta(minutes=5)},
    ])
    await store.tokens.insert_many([{"_id": "ended", "expires_at": NOW - timedelta(seconds=30)},
                                    {"_id": "live", "expires_at": NOW + timedelta(hours=1)}])
    removed = 0
    for _ in range(5):  # the first call starts at the oldest record; the window then grows over the gap
        removed += await store.expiring.purge(NOW_MS)
    assert removed == 3
    assert [d["_id"] async for d in idem.find({})] == ["kept"]
    assert [d["_id"] async for d in store.tokens.find({})] == ["live"]


async def test_an_older_paiqs_ttl_indexes_are_replaced_by_plain_ones(mongo_uri: str) -> None:
    name = unique("expiry_")
    async with open_store(mongo_uri, name) as old:
        targets = [(old.tokens, "expires_at"), (old.idempotency, "created_at"),
                   *((c, "expires_at") for c in (old.notifications.deliveries, old.notifications.rates,
                                                 old.notifications.changes))]
        for col, field in targets:
            await col.drop_indexes()
            await col.create_index([(field, ASCENDING)], expireAfterSeconds=3600)
            await col.insert_one({"_id": "r", field: NOW})
    async with open_store(mongo_uri, name) as new:
        await new.ensure_indexes()
        await new.ensure_indexes()  # a second service starting finds them done
        for col_name, field in [(c.name, f) for c, f in targets]:
            col = new.tokens.database[col_name]
            by_field = {n: i for n, i in (await col.index_information()).items() if i["key"] == [(field, ASCENDING)]}
            assert list(by_field) == ["expiry"] and "expireAfterSeconds" not in by_field["expiry"], col.name
            assert await col.count_documents({}) == 1, "the records stay"


def test_the_window_grows_over_sparse_stretches_and_halves_over_dense_ones() -> None:
    second = timedelta(seconds=1)
    assert next_window(second, 0) == 2 * second
    assert next_window(expiry.MAX_WINDOW, 0) == expiry.MAX_WINDOW
    assert next_window(10 * second, 200) == 10 * second
    assert next_window(10 * second, 300) == 5 * second
    assert next_window(expiry.FIRST_WINDOW, 10_000) == expiry.FIRST_WINDOW


async def test_a_window_holding_more_than_a_batch_is_halved_until_it_holds_one(
        store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    """A burst after a quiet stretch: the window has grown to its largest and lands on 20,000 records."""
    tokens = store.tokens
    await tokens.insert_many([{"_id": f"t{i}", "expires_at": NOW - timedelta(minutes=30) + timedelta(seconds=i / 20)}
                              for i in range(20_000)])
    await store.meta.insert_one({"_id": "expiry:tokens", "to": NOW - timedelta(hours=1)})
    purger = store.expiring
    purger._window["tokens"] = expiry.MAX_WINDOW
    deletes = counted_deletes(monkeypatch)
    for _ in range(100):
        if not await purger.purge(NOW_MS) and not await tokens.count_documents({}):
            break
    assert await tokens.count_documents({}) == 0
    assert deletes and max(deletes) <= expiry.BATCH, f"no delete removed more than a batch: {max(deletes)}"
