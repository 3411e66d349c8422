"""The live event feed for dashboards and ``paiq events``: the bus's job and task events as
Server-Sent Events at ``GET /api/v1/events[?user=U[&job=NAME]]``.

The submit service binds a private queue to ``job.*`` and ``task.*`` and fans every event out to the
connected clients. Node commands (which carry tasks' environments) never go out. A client that reads
too slowly loses its oldest events and is told so with a comment line.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field

from aiohttp import web

from services.submit.contract.route import Param, Route, text
from services.submit.contract.streams import open_stream
from services.submit.deps import DEPS
from shared.bus.base import Bus, Router
from shared.eventdocs import event_classes, event_type
from shared.events import CloudEvent, TaskExited, dump_event

CLIENT_BUFFER = 1000
KEEPALIVE_SECONDS = 5.0


@dataclass
class EventFeed:
    clients: set[asyncio.Queue[CloudEvent | None]] = field(default_factory=set)

    async def close(self, _: web.Application) -> None:
        """Let every client's stream end now, so a shutdown does not wait for them."""
        for queue in list(self.clients):
            if queue.full():
                with contextlib.suppress(asyncio.QueueEmpty):
                    queue.get_nowait()
            queue.put_nowait(None)

    async def publish(self, event: CloudEvent) -> Sequence[CloudEvent]:
        if isinstance(event, TaskExited) and event.data.diagnostics:
            # The feed is public; what a program printed is for its owner (the log route, the job detail).
            event = event.model_copy(update={"data": event.data.model_copy(update={"diagnostics": ""})})
        for queue in list(self.clients):
            if queue.full():
                with contextlib.suppress(asyncio.QueueEmpty):
                    queue.get_nowait()
            queue.put_nowait(event)
        return []

    async def attach(self, bus: Bus, queue_prefix: str) -> None:
        router = Router()
        for cls in event_classes():
            if event_type(cls).split(".")[0] in {"job", "task"}:
                router.on(cls, self.publish)
        await bus.subscribe(f"{queue_prefix}.feed.{uuid.uuid4().hex[:8]}", ["job.*", "task.*"], router,
                            durable=False)


FEED = web.AppKey("feed", EventFeed)


def _wanted(event: CloudEvent, user: str | None, job: str | None) -> bool:
    if user is None:
        return True
    if job:  # job names may hold '~': compare the id without its submission suffix
        return event.subject.rsplit("~", 1)[0] == f"{user}~{job}"
    return event.subject.startswith(f"{user}~")


async def stream_events(request: web.Request) -> web.StreamResponse:
    feed = request.app[FEED]
    user, job = request.query.get("user"), request.query.get("job")
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache",
                                           "X-Accel-Buffering": "no"})
    if not await open_stream(request, response):
        return response
    queue: asyncio.Queue[CloudEvent | None] = asyncio.Queue(maxsize=CLIENT_BUFFER)
    feed.clients.add(queue)
    try:
        await response.write(b": paiq event feed\n\n")
        while request.transport is not None and not request.transport.is_closing():
            try:
                event = await asyncio.wait_for(queue.get(), KEEPALIVE_SECONDS)
            except TimeoutError:
                await response.write(b": keepalive\n\n")
                continue
            if event is None:
                break  # the service is shutting down
            if _wanted(event, user, job):
                await response.write(b"id: " + event.id.encode() + b"\nevent: " + event.routing_key.encode()
                                     + b"\ndata: " + dump_event(event) + b"\n\n")
    except (ConnectionResetError, asyncio.CancelledError):
        pass
    finally:
        feed.clients.discard(queue)
    return response


async def start_feed(app: web.Application) -> None:
    deps = app[DEPS]
    await app[FEED].attach(deps.bus, deps.settings.queue_prefix)


def add_feed(app: web.Application) -> None:
    """The feed's lifetime: attached to the bus at startup, its streams ended at shutdown."""
    app[FEED] = EventFeed()
    app.on_startup.append(start_feed)
    app.on_shutdown.append(app[FEED].close)


ROUTES = (
    Route("GET", "/api/v1/events", stream_events, "live job and task events (CloudEvents) as Server-Sent Events; see "
          "shared/schemas/EVENTS.md", {200: text("an endless event stream", "text/event-stream")},
          params=(Param("user", "query"), Param("job", "query"))),
)
