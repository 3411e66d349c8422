"""A rate window's count under messages counted at once (a burst of one job's retries, taken in together)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from pymongo import AsyncMongoClient

from shared.db.notifications import NotificationStore
from shared.records import now_ms
from tests.infra import unique

pytestmark = pytest.mark.integration


async def test_no_more_messages_than_the_limit_see_a_count_within_it(mongo_uri: str) -> None:
    """Seven messages counted at once in a new window: the k-th lowest count is at least k (so no more than
    ``limit`` of them pass a limit), and the window holds seven."""
    client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(mongo_uri)
    try:
        notes = NotificationStore(client[unique("rates_")])
        for trial in range(5):
            key = f"u|email|{trial}"
            counts = await asyncio.gather(*(notes.count_message(key, now_ms() + 60_000) for _ in range(7)))
            assert all(c >= rank for rank, c in enumerate(sorted(counts), start=1)), counts
            assert (await notes.rates.find_one({"_id": key}) or {}).get("n") == 7
    finally:
        await client.close()
