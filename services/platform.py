"""The composition root: run several (or all) services in one process, as ``paiq up`` does.

This is the only module that knows every service. Alone on a machine it needs nothing but a Docker
engine: MongoDB is an embedded SecantusDB unless PAIQ_MONGODB_URI is set, and the bus is in-process
unless PAIQ_AMQP_URL is set. The local engine is the one node.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import AsyncExitStack, asynccontextmanager

import structlog

from services import launcher, scheduler, status, submit
from shared.db.embedded import embedded_mongo
from shared.db.store import Store, open_store
from shared.runtime.service import Starter, open_bus, watch_dependencies
from shared.runtime.vitals import Vitals
from shared.settings.model import Settings

log = structlog.get_logger("paiq.platform")

# Start order: consumers first, the API last, so nothing is accepted before it can be handled.
SERVICES: dict[str, Starter] = {
    "status": status.start,
    "scheduler": scheduler.start,
    "launcher": launcher.start,
    "submit": submit.start,
}


@asynccontextmanager
async def running_platform(settings: Settings, vitals: Vitals,
                           names: Sequence[str] = tuple(SERVICES)) -> AsyncIterator[Store]:
    unknown = set(names) - set(SERVICES)
    if unknown:
        raise ValueError(f"unknown service(s): {', '.join(sorted(unknown))}")
    async with AsyncExitStack() as stack:
        uri = settings.mongodb_uri
        if uri is None:
            settings.data_dir.mkdir(parents=True, exist_ok=True)
            uri = await stack.enter_async_context(
                embedded_mongo(settings.data_dir / "db", log_file=settings.data_dir / "db.log",
                               cache_size=settings.embedded_db_cache, on_exit=vitals.fail))
            log.info("embedded MongoDB-wire server started", storage=str(settings.data_dir / "db"))
        store = await stack.enter_async_context(open_store(uri, settings.database, settings.mongodb_timeout_seconds))
        bus = await stack.enter_async_context(open_bus(settings))
        watch_dependencies(vitals, store, bus, stack)
        for name in SERVICES:
            if name in names:
                await SERVICES[name](stack, settings, store, bus, vitals)
        yield store
