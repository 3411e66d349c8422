"""Expired records (shared.db.expiry) on a real server: removed by closed windows of their index, a backlog over
several calls, nothing unexpired, and no TTL index left for the server's monitor to scan collections with."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import pytest
from pymongo import ASCENDING

from shared.db import expiry
from shared.db.expiry import ExpiryPurger, next_window
from shared.db.store import Store, open_store
from tests.infra import unique

NOW = datetime(2026, 11, 28, 12, 0, tzinfo=UTC)
NOW_MS = int(NOW.timestamp() * 1000)


@pytest.fixture
async def store(mongo_uri: str) -> AsyncIterator[Store]:
    async with open_store(mongo_uri, unique("expiry_")) as s:
        yield s


async def test_a_backlog_goes_over_several_calls_a_window_at_a_time_and_nothing_unexpired_goes(
        store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    deliveries = store.notifications.deliveries
    # 3,000 deliveries that expired over the last 3 hours (one every 3.6 s), 200 still to expire
    expired = [{"_id": f"old-{i}", "expires_at": NOW - timedelta(seconds=3.6 * (i + 1))} for i in range(3000)]
    alive = [{"_id": f"new-{i}", "expires_at": NOW + timedelta(seconds=i + 1)} for i in range(200)]
    await deliveries.insert_many(expired + alive)
    # where the last purge stopped: 3 hours ago (a platform that was down that long)
    await store.meta.insert_one({"_id": "expiry:notify_deliveries", "to": NOW - timedelta(hours=3, seconds=10)})
    monkeypatch.setattr(expiry, "WINDOWS_PER_CALL", 8)
    calls = []
    for _ in range(40):
        removed = await store.notifications.purge(NOW_MS)
        calls.append(removed)
        if removed == 0 and await deliveries.count_documents({"_id": {"$regex": "^old-"}}) == 0:
            break
    assert await deliveries.count_documents({}) == 200, "every expired delivery went, none of the others"
    assert len([c for c in calls if c]) >= 3, f"the backlog went over several calls, not one: {calls}"
    assert max(calls) < 3000
    position = await store.meta.find_one({"_id": "expiry:notify_deliveries"})
    assert position is not None and position["to"].replace(tzinfo=UTC) == NOW, "it stopped at now, not past it"


async def test_records_keep_their_time_after_their_field_and_the_first_purge_looks_back_an_hour(
        store: Store) -> None:
    keep = timedelta(days=1)
    idem = store.idempotency
    await idem.insert_many([
        {"_id": "two-hours-past", "created_at": NOW - keep - timedelta(hours=2)},  # went by the old TTL index
        {"_id": "minutes-past", "created_at": NOW - keep - timedelta(minutes=5)},
        {"_id": "kept", "created_at": NOW - keep + timedelta(minutes=5)},
    ])
    await store.tokens.insert_many([{"_id": "ended", "expires_at": NOW - timedelta(seconds=30)},
                                    {"_id": "live", "expires_at": NOW + timedelta(hours=1)}])
    assert await store.expiring.purge(NOW_MS) == 2
    assert {d["_id"] async for d in idem.find({})} == {"two-hours-past", "kept"}
    assert [d["_id"] async for d in store.tokens.find({})] == ["live"]


async def test_an_older_paiqs_ttl_index_is_replaced_by_a_plain_one(mongo_uri: str) -> None:
    name = unique("expiry_")
    async with open_store(mongo_uri, name) as old:
        await old.tokens.drop_indexes()
        await old.tokens.create_index([("expires_at", ASCENDING)], expireAfterSeconds=0)
        await old.tokens.insert_one({"_id": "t", "expires_at": NOW})
    async with open_store(mongo_uri, name) as new:
        await new.ensure_indexes()
        by_field = {n: i for n, i in (await new.tokens.index_information()).items()
                    if i["key"] == [("expires_at", ASCENDING)]}
        assert list(by_field) == ["expiry"] and "expireAfterSeconds" not in by_field["expiry"]
        for col in (new.idempotency, new.notifications.deliveries, new.notifications.rates,
                    new.notifications.changes):
            assert not [i for i in (await col.index_information()).values() if "expireAfterSeconds" in i], col.name
        assert await new.tokens.count_documents({}) == 1, "the records stay"
        assert await ExpiryPurger(new.meta.database, []).purge(NOW_MS) == 0


def test_the_window_grows_over_sparse_stretches_and_halves_over_dense_ones() -> None:
    second = timedelta(seconds=1)
    assert next_window(second, 0) == 2 * second
    assert next_window(expiry.MAX_WINDOW, 0) == expiry.MAX_WINDOW
    assert next_window(10 * second, 300) == 10 * second
    assert next_window(10 * second, 501) == 5 * second
    assert next_window(second, 10_000) == expiry.FIRST_WINDOW


async def test_a_window_that_runs_out_of_time_is_tried_smaller_and_the_purge_goes_on(
        store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    tokens = store.tokens
    await tokens.insert_many([{"_id": f"t{i}", "expires_at": NOW - timedelta(minutes=30) + timedelta(seconds=i)}
                              for i in range(1000)])
    purger = store.expiring
    purger._window["tokens"] = expiry.MAX_WINDOW  # one window would take them all
    monkeypatch.setattr(expiry, "CALL_SECONDS", 0.000001)  # and no call has the time
    assert await purger.purge(NOW_MS) == 0, "no error: the periodic purge goes on"
    assert purger._window["tokens"] == expiry.MAX_WINDOW / 8
    monkeypatch.setattr(expiry, "CALL_SECONDS", 10.0)
    for _ in range(10):
        await purger.purge(NOW_MS)
    assert await tokens.count_documents({}) == 0
