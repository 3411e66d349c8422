"""The scheduler service: gang placement of waiting jobs onto registered nodes.

``start`` wires the service into a running process (its own, or ``paiq up``).
"""

from __future__ import annotations

from contextlib import AsyncExitStack

from services.scheduler.service import SchedulerDeps, start_scheduler
from shared.bus.base import Bus
from shared.db.store import Store
from shared.ops.vitals import Vitals
from shared.settings.model import Settings


async def start(stack: AsyncExitStack, settings: Settings, store: Store, bus: Bus, vitals: Vitals) -> None:
    await start_scheduler(stack, SchedulerDeps(settings=settings, store=store, bus=bus, vitals=vitals))
