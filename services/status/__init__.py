"""The status service: task and job states, and the completion decision.

``start`` wires the service into a running process (its own, or ``paiq up``).
"""

from __future__ import annotations

from contextlib import AsyncExitStack

from services.status.service import StatusDeps, retry_policy, start_status
from shared.bus.base import Bus
from shared.db.store import Store
from shared.ops.vitals import Vitals
from shared.settings.model import Settings


async def start(stack: AsyncExitStack, settings: Settings, store: Store, bus: Bus, vitals: Vitals) -> None:
    await start_status(stack, StatusDeps(settings=settings, store=store, bus=bus, policy=retry_policy(settings),
                                          vitals=vitals))
