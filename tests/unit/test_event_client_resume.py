"""``paiq events``' client (services/cli/client.py) reads Server-Sent Events as the standard does: an event
counts, and its id becomes the place to resume from, only at the blank line that ends it. A server killed
mid-write (the stream cut after an event's ``id:`` line, or inside its ``data:``) is taken up again before
that event, which then comes whole; nothing is skipped and nothing half-read is parsed.

The server here is a real aiohttp server that cuts its first answer where it is told to."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from services.cli.client import paiq_client

pytestmark = pytest.mark.unit


def frame(seq: int) -> bytes:
    body = json.dumps({"id": f"event-{seq}", "type": "task.started", "seq": seq})
    return b"id: %d\nevent: task.started\ndata: %s\n\n" % (seq, body.encode())


class CuttingFeed:
    """Events 1..5; the first answer sends 1 and 2 whole, then ``cut`` (part of event 3) and breaks off."""

    def __init__(self, cut: bytes) -> None:
        self.cut = cut
        self.resumed_after: list[str | None] = []

    async def handle(self, request: web.Request) -> web.StreamResponse:
        after = request.headers.get("Last-Event-ID")
        self.resumed_after.append(after)
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        if len(self.resumed_after) == 1:
            await response.write(b": paiq event feed\n\n" + frame(1) + frame(2) + self.cut)
            assert request.transport is not None
            request.transport.abort()  # as a server killed -9: the rest of the event never comes
            return response
        for seq in range(int(after or 0) + 1, 6):
            await response.write(frame(seq))
        await asyncio.sleep(30)  # a live stream: the client stops reading once it has what it wants
        return response


@pytest.fixture(params=[b"id: 3\n", b"id: 3\nevent: task.started\n", b'id: 3\nevent: task.started\ndata: {"id": "ev',
                        b'id: 3\nevent: task.started\ndata: {"id": "event-3"}\n'],
                ids=["after-id", "after-event", "inside-data", "before-the-blank-line"])
async def feed(request: pytest.FixtureRequest) -> AsyncIterator[tuple[CuttingFeed, str]]:
    cutting = CuttingFeed(request.param)
    app = web.Application()
    app.router.add_get("/api/v1/events", cutting.handle)
    async with TestServer(app) as server:
        yield cutting, str(server.make_url("")).rstrip("/")


async def test_a_stream_cut_mid_event_resumes_before_that_event(feed: tuple[CuttingFeed, str]) -> None:
    cutting, base = feed
    seen: list[int] = []
    async with paiq_client(base) as client:
        async with asyncio.timeout(20):
            async for event in client.events(since="0", reconnect=True):
                seen.append(event["seq"])
                if len(seen) == 5:
                    break
    assert seen == [1, 2, 3, 4, 5], f"every event once, in order: {seen}"
    assert cutting.resumed_after == [None, "2"], "taken up after the last whole event, not the one cut short"
