"""What the launcher's handlers are given, and the little it remembers in memory.

Everything in memory is a cache of work in flight (so one process never does the same thing twice at
once); what must survive a crash lives in Docker (containers, by label and deterministic name) and in
MongoDB (jobs, and the task runs of :mod:`shared.logstore`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any

import structlog

from services.launcher.driver import ContainerDriver
from shared.bus.base import Bus
from shared.errors import BusError
from shared.events import CloudEvent
from shared.logstore import LogStore
from shared.settings import LauncherSettings, NodeSettings, Settings
from shared.store import Store

log = structlog.get_logger("paiq.launcher")


@dataclass
class LauncherDeps:
    settings: Settings
    store: Store
    bus: Bus
    driver: ContainerDriver
    logs: LogStore
    # work in flight, keyed so that a second request joins the first
    pulls: dict[tuple[str, str], asyncio.Task[None]] = field(default_factory=dict)
    launching: dict[str, asyncio.Task[list[CloudEvent]]] = field(default_factory=dict)  # by container name
    recorders: dict[str, asyncio.Task[None]] = field(default_factory=dict)  # by container id
    finishing: dict[str, asyncio.Task[None]] = field(default_factory=dict)  # by container id
    stopped_by_user: set[str] = field(default_factory=set)  # container ids
    stopping: set[str] = field(default_factory=set)  # container ids
    kept_announced: set[str] = field(default_factory=set)  # container ids
    background: set[asyncio.Task[Any]] = field(default_factory=set)

    @property
    def node(self) -> NodeSettings:
        return self.settings.node

    @property
    def options(self) -> LauncherSettings:
        return self.settings.launcher

    def spawn(self, name: str, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        """Run ``coro`` in the background, kept referenced until done; a failure is logged."""
        task = asyncio.create_task(coro, name=name)
        self.background.add(task)
        task.add_done_callback(self._done)
        return task

    def _done(self, task: asyncio.Task[Any]) -> None:
        self.background.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("background work of the launcher failed; the next reconcile pass retries it",
                      work=task.get_name(), error=repr(task.exception()))

    async def publish(self, events: list[CloudEvent]) -> None:
        """Publish now (outside a handler's reply); a bus failure is logged, the reconcile pass repairs it."""
        if not events:
            return
        try:
            await self.bus.publish(events)
        except BusError as e:
            log.warning("could not publish; the next reconcile pass reports it again", error=str(e))

    async def close(self) -> None:
        """Cancel the work in flight (containers keep running; the next start picks everything up)."""
        work: list[asyncio.Task[Any]] = [*self.background, *self.recorders.values(), *self.launching.values(),
                                          *self.finishing.values(), *self.pulls.values()]
        for task in work:
            task.cancel()
        await asyncio.gather(*work, return_exceptions=True)
