"""Resuming the event stream (GET /api/v1/events): Last-Event-ID and since, by number, event id, time or span
ago, filtered by user and job; 400 for what cannot be read; 410 EventsExpiredError before the stream starts
for what the journal no longer keeps (services/submit/routes/feed.py, over an in-memory journal)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any, cast

import pytest
from aiohttp.test_utils import TestClient, TestServer

from services.submit.app import create_app
from services.submit.deps import SubmitDeps
from shared.bus.memory import MemoryBus
from shared.db.journal import JournalState
from shared.events import JobSubmitted, JobSubmittedData
from shared.settings.model import Settings
from tests.unit.test_openapi_answers import FakeJournal, FakeStore, FakeUsers

pytestmark = pytest.mark.unit


def submitted(job_id: str) -> JobSubmitted:
    return JobSubmitted(subject=job_id, data=JobSubmittedData(job_id=job_id, user=job_id.split("~")[0],
                                                              virtual_cluster="default"))


class KeptJournal(FakeJournal):
    """A journal whose oldest entries were removed: it keeps number ``first`` on."""

    def __init__(self, first: int) -> None:
        super().__init__()
        self.first = first

    async def state(self) -> JournalState:
        return JournalState(last=len(self.entries), published=len(self.entries), first=self.first)


@pytest.fixture
async def journal() -> KeptJournal:
    kept = KeptJournal(first=3)
    kept.add([submitted(f"{u}~j{i}~0000000{i}") for i, u in enumerate(["alice", "bob", "alice", "bob", "alice"])])
    return kept


@pytest.fixture
async def client(journal: KeptJournal) -> AsyncIterator[TestClient[Any, Any]]:
    deps = SubmitDeps(settings=Settings.from_env({}), store=cast(Any, FakeStore(journal=journal)), bus=MemoryBus(),
                      users=cast(Any, FakeUsers()))
    async with TestClient(TestServer(create_app(deps))) as test_client:
        yield test_client
    deps.cpu.shutdown()


async def read_ids(client: TestClient[Any, Any], path: str, count: int, **headers: str) -> list[int]:
    """The ``id:`` of the first ``count`` events the stream sends."""
    ids: list[int] = []
    async with client.get(path, headers=headers) as resp:
        assert resp.status == 200, await resp.text()
        async with asyncio.timeout(5):
            async for raw in resp.content:
                line = raw.decode()
                if line.startswith("id: "):
                    ids.append(int(line[4:]))
                    if len(ids) == count:
                        break
    return ids


async def test_last_event_id_resumes_after_that_number(client: TestClient[Any, Any]) -> None:
    assert await read_ids(client, "/api/v1/events", 2, **{"Last-Event-ID": "3"}) == [4, 5]


async def test_since_by_number_event_id_and_span(client: TestClient[Any, Any], journal: KeptJournal) -> None:
    assert await read_ids(client, "/api/v1/events?since=2", 3) == [3, 4, 5]
    assert await read_ids(client, f"/api/v1/events?since={journal.entries[2].id}", 2) == [4, 5]
    assert await read_ids(client, "/api/v1/events?since=10m", 3) == [3, 4, 5]  # the in-memory journal: all at 0


async def test_the_filters_apply_to_what_is_replayed(client: TestClient[Any, Any]) -> None:
    assert await read_ids(client, "/api/v1/events?since=2&user=alice", 2) == [3, 5]


async def test_what_the_journal_no_longer_keeps_is_410_before_the_stream(client: TestClient[Any, Any]) -> None:
    async with client.get("/api/v1/events", headers={"Last-Event-ID": "1"}) as resp:
        body = await resp.json()
    assert resp.status == 410 and body["code"] == "EventsExpiredError", body
    assert "the oldest kept is number 3" in body["message"] and "PAIQ_EVENT_RETENTION_HOURS" in body["message"]
    async with client.get("/api/v1/events?since=0123456789abcdef0123456789abcdef") as resp:
        assert resp.status == 410, "an event id the journal does not have: removed, or never was"


@pytest.mark.parametrize("since", ["yesterday", "-5", "10x", "2026-13-40"])
async def test_an_unreadable_since_is_400_naming_the_forms(client: TestClient[Any, Any], since: str) -> None:
    async with client.get(f"/api/v1/events?since={since}") as resp:
        body = await resp.json()
    assert resp.status == 400 and body["message"].startswith("since: must be an event's number or id"), body
