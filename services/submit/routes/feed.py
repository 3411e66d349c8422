"""The event stream for dashboards, gateways and ``paiq events``: the journal's job and task events
(:mod:`shared.db.journal`) as Server-Sent Events at ``GET /api/v1/events[?user=U[&job=NAME]][&since=S]``.

Each event goes out as ``id: <number>`` (its place in the journal), ``event: <type>`` and ``data: <the
CloudEvent>``. A client that reconnects with ``Last-Event-ID`` (every SSE client does) or ``?since=`` gets
what it missed, then what comes: ``since`` is a number, an event's id, a time (ISO 8601, or ``10m``, ``2h``,
``1d`` ago). One older than the journal keeps (``PAIQ_EVENT_RETENTION_HOURS``) is answered ``410
EventsExpiredError`` before the stream starts, as Kubernetes answers a watch from a compacted
resourceVersion: the client reads the current state, then follows from now. Without either the stream
starts at the newest event. Node commands (which carry tasks' environments) are never journaled; what a
task's program printed (a ``task.exited``'s diagnostics) is its owner's and is cut from the public stream.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from datetime import datetime

from aiohttp import web

from services.submit.contract.route import Param, Route, text
from services.submit.contract.streams import open_stream
from services.submit.deps import DEPS
from services.submit.errors import ApiError
from shared.db.journal import JournalEntry
from shared.events import TaskExited, dump_event, parse_event
from shared.records import now_ms

KEEPALIVE_SECONDS = 5.0
BATCH = 500
_AGO = re.compile(r"^(\d+)([smhd])$")
_UNIT_MS = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def _wanted(entry: JournalEntry, user: str | None, job: str | None) -> bool:
    if user is None:
        return True
    if job:  # job names may hold '~': compare the id without its submission suffix
        return entry.job.rsplit("~", 1)[0] == f"{user}~{job}"
    return entry.job.startswith(f"{user}~")


def _public(entry: JournalEntry) -> bytes:
    """The event as the public stream shows it: what a task's program printed is its owner's (the log route,
    the job detail), never the stream's."""
    if entry.type != "task.exited" or '"diagnostics":""' in entry.body:
        return entry.body.encode()
    event = parse_event(entry.body)
    if isinstance(event, TaskExited) and event.data.diagnostics:
        event = event.model_copy(update={"data": event.data.model_copy(update={"diagnostics": ""})})
    return dump_event(event)


async def _start_after(request: web.Request) -> int | None:
    """The number after which the stream starts (None: the newest), from ``Last-Event-ID`` or ``?since=``;
    400 for one it cannot read, 410 for one older than the journal keeps."""
    raw = request.headers.get("Last-Event-ID") or request.query.get("since")
    if not raw:
        return None
    deps = request.app[DEPS]
    journal = deps.store.journal
    raw = raw.strip()
    if raw.isdigit():
        after = int(raw)
    elif re.fullmatch(r"[0-9a-f]{32}", raw):
        found = await journal.number_of(raw)
        if found is None:
            raise _expired(raw, await journal.state())
        after = found
    else:
        when = _time_of(raw)
        kept_ms = int(deps.settings.event_retention_hours * 3_600_000)
        state = await journal.state()
        if kept_ms and when < now_ms() - kept_ms and state.first > 1:
            raise _expired(raw, state)  # the journal kept no more than that: some of the span is gone
        after = max(await journal.number_at(when), state.first - 1)
    state = await journal.state()
    if after < state.first - 1:
        raise _expired(raw, state)
    return min(after, state.last)


def _time_of(raw: str) -> int:
    """``since`` as a time (ms): a span ago (10m, 2h, 1d) or an ISO 8601 time; 400 otherwise."""
    if (m := _AGO.match(raw)) is not None:
        return now_ms() - int(m.group(1)) * _UNIT_MS[m.group(2)]
    try:
        when = datetime.fromisoformat(raw.replace("Z", "+00:00"))
    except ValueError:
        raise ApiError("InvalidParametersError", f"since: must be an event's number or id, a time (ISO 8601) or a "
                                                 f"span ago such as 10m, 2h or 1d, got {raw[:64]!r}") from None
    if when.tzinfo is None:
        raise ApiError("InvalidParametersError", f"since: a time must say its zone (2026-11-28T14:00:00Z), got "
                                                 f"{raw[:64]!r}")
    return int(when.timestamp() * 1000)


def _expired(asked: str, state: object) -> ApiError:
    first = getattr(state, "first", 1)
    return ApiError("EventsExpiredError", (
        f"the events after {asked[:64]} are no longer kept (PAIQ_EVENT_RETENTION_HOURS): the oldest kept is number "
        f"{first}; read the jobs' state (GET /api/v1/jobs), then follow from now (without since or Last-Event-ID)"))


async def stream_events(request: web.Request) -> web.StreamResponse:
    user, job = request.query.get("user"), request.query.get("job")
    store = request.app[DEPS].store
    journal, tail = store.journal, store.journal.tail
    after = await _start_after(request)
    if after is None:
        after = max(tail.last, (await journal.state()).last)
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache",
                                           "X-Accel-Buffering": "no"})
    if not await open_stream(request, response):
        return response
    closing = request.app[CLOSING]
    try:
        await response.write(b": paiq event feed\n\n")
        while request.transport is not None and not request.transport.is_closing() and not closing.is_set():
            entries = await journal.read(after, BATCH, through=max(tail.last, after))
            for entry in entries:
                if _wanted(entry, user, job):
                    await response.write(b"id: %d\nevent: %s\ndata: %s\n\n" % (entry.seq, entry.type.encode(),
                                                                                _public(entry)))
                after = entry.seq
            if len(entries) == BATCH:
                continue  # catching up
            if not await tail.wait_past(after, KEEPALIVE_SECONDS):
                await response.write(b": keepalive\n\n")
    except (ConnectionResetError, asyncio.CancelledError):
        pass
    return response


CLOSING = web.AppKey("feed-closing", asyncio.Event)


def add_feed(app: web.Application) -> None:
    """The streams end at shutdown, so that it does not wait for them."""
    app[CLOSING] = asyncio.Event()

    async def close(_: web.Application) -> None:
        app[CLOSING].set()
        with contextlib.suppress(AttributeError):  # an app of the tests' without a store streams nothing
            app[DEPS].store.journal.tail.wake()  # every stream sees that it is to end

    app.on_shutdown.append(close)


ROUTES = (
    Route("GET", "/api/v1/events", stream_events, "job and task events (CloudEvents) as Server-Sent Events, from "
          "the journal: each with its number as its id; Last-Event-ID or since resumes after one (410 when older "
          "than PAIQ_EVENT_RETENTION_HOURS); see shared/schemas/EVENTS.md",
          {200: text("an endless event stream", "text/event-stream")},
          (400, 410), also={410: ("EventsExpiredError",)},
          params=(Param("user", "query"), Param("job", "query"), Param("since", "query"))),
)
