"""Lifetimes shared by the services: the bus, periodic loops, and waiting for a shutdown signal."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import signal
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import AsyncExitStack, asynccontextmanager
from typing import TYPE_CHECKING

import structlog

from shared.bus.base import Bus
from shared.bus.memory import MemoryBus
from shared.settings import Settings

if TYPE_CHECKING:
    from shared.store import Store

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


def start_periodic(stack: AsyncExitStack, name: str, seconds: float,
                   fn: Callable[[], Awaitable[None]]) -> None:
    """Run ``fn`` every ``seconds`` until ``stack`` closes; a failing round is logged, not fatal."""

    async def loop() -> None:
        while True:
            await asyncio.sleep(seconds)
            try:
                await fn()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("periodic round failed; will try again", loop=name)

    task = asyncio.create_task(loop(), name=name)
    stack.push_async_callback(_cancel, task)


def start_background(stack: AsyncExitStack, name: str, coro: Awaitable[None]) -> asyncio.Task[None]:
    async def wrapped() -> None:
        await coro

    task = asyncio.create_task(wrapped(), name=name)
    stack.push_async_callback(_cancel, task)
    return task


async def _cancel(task: asyncio.Task[None]) -> None:
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


def freeze_startup_heap() -> None:
    """Once started: move what start-up allocated (modules, models, schemas: ~90,000 objects) out of the
    garbage collector's view. Its full collections then scan only what requests and passes allocate,
    instead of pausing the event loop ~60 ms each (tests/benchmarks/worst_job.py measured it)."""
    gc.collect()
    gc.freeze()


async def wait_for_shutdown() -> None:
    """Return on SIGINT or SIGTERM."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)


Starter = Callable[[AsyncExitStack, Settings, "Store", Bus], Awaitable[None]]


def run_service(name: str, start: Starter, env: Mapping[str, str]) -> None:
    """The whole ``__main__`` of a service: settings -> logging -> store -> bus -> handlers -> wait."""
    from shared.errors import PaiqError
    from shared.logsetup import configure_logging
    from shared.metrics import start_ops_server
    from shared.store import open_store

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

    async def main() -> None:
        assert settings.mongodb_uri is not None
        async with AsyncExitStack() as stack:
            store = await stack.enter_async_context(open_store(settings.mongodb_uri, settings.database))
            bus = await stack.enter_async_context(open_bus(settings))
            await start(stack, settings, store, bus)
            if name != "submit":  # submit serves /healthz and /metrics on its API port
                await start_ops_server(stack, settings.ops_host, settings.ops_ports[name], store.ping, name)
            freeze_startup_heap()
            await wait_for_shutdown()
            log.info("shutting down", service=name)

    try:
        asyncio.run(main())
    except PaiqError as e:
        raise SystemExit(f"paiq {name}: {e}") from e
