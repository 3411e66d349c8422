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


async def test_messages_counted_at_once_each_get_their_own_number(mongo_uri: str) -> None:
    """Seven messages counted at once in a new window get the counts 1 to 7, each once (so exactly ``limit`` of
    them pass a limit: no more, and none held back within it), and the window holds seven."""
    client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(mongo_uri)
    try:
        notes = NotificationStore(client[unique("rates_")])
        for trial in range(5):
            key = f"u|email|{trial}"
            counts = await asyncio.gather(*(notes.count_message(key, now_ms() + 60_000) for _ in range(7)))
            assert sorted(counts) == list(range(1, 8)), counts
            assert (await notes.rates.find_one({"_id": key}) or {}).get("n") == 7
    finally:
        await client.close()
