"""Database writes that survive a short restart: an idempotent operation tried again while the server is away.

paiq gives SecantusDB ``retryWrites=false`` (docs: its retryable-write records slow it down), so the
driver does not try a write again when the connection it went out on dies, as a server restart makes
every pooled connection do. A write that may be applied twice with the same result (a ``$set``, an upsert
by id, a delete) goes through :func:`idempotent`: tried again after a connection error until the window
(the driver's server selection, 30 s) has passed, so a restart within it only delays the answer.
Not for inserts of new ids whose first try may have committed: those read their own write first.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

import structlog
from pymongo.errors import AutoReconnect

log = structlog.get_logger("paiq.store")

T = TypeVar("T")
WINDOW_SECONDS = 30.0
FIRST_DELAY_SECONDS = 0.1
MAX_DELAY_SECONDS = 2.0


async def idempotent(op: Callable[[], Awaitable[T]], what: str, window_seconds: float = WINDOW_SECONDS) -> T:
    """``op()``, tried again after connection errors (``AutoReconnect``: a closed connection, a refused one,
    no server within the selection timeout) until ``window_seconds`` have passed since the first try."""
    deadline = time.monotonic() + window_seconds
    delay = FIRST_DELAY_SECONDS
    tries = 0
    while True:
        tries += 1
        try:
            result = await op()
        except AutoReconnect as e:
            if time.monotonic() + delay >= deadline:
                raise
            if tries == 1:
                log.info("database connection failed during a write; trying again", write=what,
                         error=type(e).__name__)
            await asyncio.sleep(delay)
            delay = min(delay * 2, MAX_DELAY_SECONDS)
            continue
        if tries > 1:
            log.info("write done after the database came back", write=what, tries=tries)
        return result
