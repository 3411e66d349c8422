"""Many small database calls made as few: a :class:`Batcher` takes one item per call and hands whatever items
arrived meanwhile to one bulk operation, which answers each call with its own result.

Batches form by themselves: while one bulk call is out, the next calls wait and go together as the next batch.
With nothing in flight a call goes at once (after one turn of the event loop, so that the calls made in the
same turn, such as an event's recipients' deliveries, go as one), so a lone call waits no longer than it
would alone; under a burst, a thousand messages cost a few dozen round trips instead of a thousand.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, TypeVar

# Items in one bulk call at most. SecantusDB matches a document against an ``$in`` by walking its list, so a call
# of n ids costs it n^2: marking 64 sent cost 1.0 ms a delivery, 128 at once 1.5 (tests/benchmarks/notify.py)
MOST = 64

T = TypeVar("T")
R = TypeVar("R")


class Batcher(Generic[T, R]):
    def __init__(self, run: Callable[[list[T]], Awaitable[Sequence[R]]], *, most: int | None = None) -> None:
        self._run = run
        self._most = most or MOST
        self._waiting: list[tuple[T, asyncio.Future[R]]] = []
        self._draining: asyncio.Task[None] | None = None

    async def __call__(self, item: T) -> R:
        future: asyncio.Future[R] = asyncio.get_running_loop().create_future()
        self._waiting.append((item, future))
        if self._draining is None:
            self._draining = asyncio.create_task(self._drain())
        return await future

    async def _drain(self) -> None:
        batch: list[tuple[T, asyncio.Future[R]]] = []
        try:
            await asyncio.sleep(0)  # the calls made in this turn of the loop join the first batch
            while self._waiting:
                batch, self._waiting = self._waiting[:self._most], self._waiting[self._most:]
                try:
                    results = await self._run([item for item, _ in batch])
                except Exception as e:  # each caller hears the bulk call's error, as its own call would
                    for _, future in batch:
                        if not future.done():
                            future.set_exception(e)
                    continue
                for (_, future), result in zip(batch, results, strict=True):
                    if not future.done():
                        future.set_result(result)
        finally:
            self._draining = None
            for _, future in [*batch, *self._waiting]:  # cancelled (the service stopping): nobody will answer
                if not future.done():
                    future.cancel()
            self._waiting = []
