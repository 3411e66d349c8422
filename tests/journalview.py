"""What a test's services said: the events they journaled with their changes (shared/db/journal.py) besides
the commands they return to publish, for tests that call a service's pass or handler directly (no relay runs
there, so the journal's entries wait to be numbered; each is returned once)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pymongo import ASCENDING

from shared.db.store import Store
from shared.events import CloudEvent, parse_event

_SEEN: dict[int, set[str]] = {}


async def journaled(store: Store) -> list[CloudEvent]:
    """The events ``store``'s writers journaled since the last call (in the order they became visible)."""
    seen = _SEEN.setdefault(id(store), set())
    found: list[CloudEvent] = []
    async for doc in store.journal.entries.find({"q": {"$gte": 0}}).sort([("q", ASCENDING), ("_id", ASCENDING)]):
        if doc["_id"] not in seen:
            seen.add(doc["_id"])
            found.append(parse_event(doc["body"]))
    return found


_VERSIONS: dict[str, int] = {}


async def journal(store: Store, events: Sequence[CloudEvent]) -> None:
    """Store ``events`` as one change of their jobs' (each its own version, rising), as a writer does, and wake
    the relay of this process (a test's notifier, stream...)."""
    for event in events:
        version = _VERSIONS[event.subject] = _VERSIONS.get(event.subject, 0) + 1
        await store.journal.record([event], version=version, session=None)
    store.journal.touched()


async def passed(deps: Any) -> list[CloudEvent]:
    """A scheduler pass (services.scheduler.service.schedule_pass): the commands it returns and the events it
    journaled."""
    from services.scheduler.service import schedule_pass

    commands = await schedule_pass(deps)
    return [*await journaled(deps.store), *commands]
