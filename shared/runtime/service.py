"""Lifetimes shared by the services: the bus, the process's vitals, and waiting for a shutdown signal or a
fatal failure."""

from __future__ import annotations

import asyncio
import gc
import os
import signal
import sys
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import AsyncExitStack, asynccontextmanager
from typing import TYPE_CHECKING

import structlog
from pymongo.errors import PyMongoError

from shared.bus.base import Bus
from shared.bus.memory import MemoryBus
from shared.ops.vitals import Vitals, describe, is_outage
from shared.settings.model import Settings

if TYPE_CHECKING:
    from shared.db.store import Store

log = structlog.get_logger("paiq.runtime")


@asynccontextmanager
async def open_bus(settings: Settings) -> AsyncIterator[Bus]:
    """RabbitMQ when ``PAIQ_AMQP_URL`` is set, otherwise the in-process bus."""
    if settings.amqp_url:
        from shared.bus.amqp import open_amqp_bus

        async with open_amqp_bus(settings.amqp_url, settings.exchange, settings.queue_prefix) as bus:
            yield bus
    else:
        memory = MemoryBus()
        try:
            yield memory
        finally:
            await memory.close()


def freeze_startup_heap() -> None:
    """Once started: move what start-up allocated (modules, models, schemas: ~90,000 objects) out of the
    garbage collector's view. Its full collections then scan only what requests and passes allocate,
    instead of pausing the event loop ~60 ms each (tests/benchmarks/worst_job.py measured it)."""
    gc.collect()
    gc.freeze()


async def wait_for_shutdown(vitals: Vitals) -> str | None:
    """Return on SIGINT or SIGTERM (None), or once something fatal happened (its reason)."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    signalled = asyncio.create_task(stop.wait())
    fatal = asyncio.create_task(vitals.wait_fatal())
    try:
        await asyncio.wait({signalled, fatal}, return_when=asyncio.FIRST_COMPLETED)
        vitals.stopping = True  # what closes now is cancelled at once, rounds in flight included
        if fatal.done():
            exit_within(FATAL_EXIT_SECONDS, fatal.result())
        return fatal.result() if fatal.done() else None
    finally:
        signalled.cancel()
        fatal.cancel()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)


# A process that must stop (its database gone, a loop ended) ends within this, whatever its shutdown still waits
# for (calls to a dead database wait out their deadline): its supervisor restarts it, and a second one cannot
# start beside it.
FATAL_EXIT_SECONDS = 10.0


def exit_within(seconds: float, reason: str) -> None:
    """Exit (code 1, one line on stderr) ``seconds`` from now unless the process has ended by itself: a thread,
    so that a stuck event loop cannot hold it."""
    def force() -> None:
        print(f"paiq: {reason}; its shutdown did not end within {seconds:g} s, so it exits now", file=sys.stderr,
              flush=True)
        os._exit(1)

    timer = threading.Timer(seconds, force)
    timer.daemon = True
    timer.start()


Starter = Callable[[AsyncExitStack, Settings, "Store", Bus, Vitals], Awaitable[None]]


def watch_dependencies(vitals: Vitals, store: Store, bus: Bus, stack: AsyncExitStack) -> None:
    """What /healthz checks besides the loops: the database answers and the broker is connected; and the
    watch that stops a process whose rounds or checks are stuck (shared.ops.vitals)."""
    vitals.add_check("database", store.ping)
    vitals.add_check("broker", bus.check)
    vitals.watch_stuck(stack)


async def refuse_open_servers(settings: Settings) -> None:
    """Stop (OpenServerError) before using a database or broker that admits callers without a login."""
    from shared.runtime.exposure import refuse_guest_broker, refuse_open_database

    if settings.mongodb_uri:
        await refuse_open_database(settings.mongodb_uri, settings.database)
    if settings.amqp_url:
        await refuse_guest_broker(settings.amqp_url)


def lost_dependency(error: BaseException) -> str | None:
    """The line a process exits with when its database or broker went away while it started (or stopped):
    outside its loops, which wait an outage out, nothing waits for one; None for any other error."""
    if not is_outage(error):
        return None
    seen: BaseException | None = error
    while seen is not None and not isinstance(seen, PyMongoError):
        seen = seen.__cause__
    what = "the database (MongoDB)" if seen is not None else "the broker (RabbitMQ)"
    return f"lost {what} while starting or stopping: {describe(error)}"


def run_service(name: str, start: Starter, env: Mapping[str, str]) -> None:
    """The whole ``__main__`` of a service: settings -> logging -> store -> bus -> handlers -> wait."""
    from shared.db.store import open_store
    from shared.errors import PaiqError
    from shared.ops.logsetup import configure_logging
    from shared.ops.metrics import start_ops_server
    from shared.runtime.relay import start_relay

    try:
        settings = Settings.from_env(env)
    except PaiqError as e:
        raise SystemExit(f"paiq {name}: {e}") from e
    configure_logging(settings.log_level, settings.log_format, service=name)
    missing = [var for var, value in (("PAIQ_MONGODB_URI", settings.mongodb_uri),
                                      ("PAIQ_AMQP_URL", settings.amqp_url)) if not value]
    if missing:
        raise SystemExit(f"paiq {name}: {' and '.join(missing)} must be set to run the service on its own "
                         "(or use `paiq up` for everything in one process)")

    async def main() -> str | None:
        assert settings.mongodb_uri is not None
        vitals = Vitals()
        await refuse_open_servers(settings)
        async with AsyncExitStack() as stack:
            store = await stack.enter_async_context(
                open_store(settings.mongodb_uri, settings.database, settings.mongodb_timeout_seconds))
            bus = await stack.enter_async_context(open_bus(settings))
            watch_dependencies(vitals, store, bus, stack)
            if name != "launcher":  # the control plane's processes number and publish; a node's agent does not
                await start_relay(stack, store, bus, vitals, queue_prefix=settings.queue_prefix,
                                  retention_hours=settings.event_retention_hours)
            if name != "submit":  # submit serves /healthz and /metrics on its API port, once started
                # before the service starts, so that a start that hangs is seen (/livez: a stuck round)
                await start_ops_server(stack, settings.ops_host, settings.ops_ports[name], vitals.report,
                                       vitals.liveness, name)
            async with vitals.starting(f"{name}-start"):
                await start(stack, settings, store, bus, vitals)
            freeze_startup_heap()
            fatal = await wait_for_shutdown(vitals)
            log.info("shutting down", service=name, fatal=fatal)
            return fatal

    try:
        fatal = asyncio.run(main())
    except PaiqError as e:
        raise SystemExit(f"paiq {name}: {e}") from e
    except Exception as e:
        lost = lost_dependency(e)
        if lost is None:
            raise
        raise SystemExit(f"paiq {name}: {lost}") from e
    if fatal:
        raise SystemExit(f"paiq {name}: {fatal}")
