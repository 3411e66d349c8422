"""The submit service: paiq's OpenPAI-compatible REST API.

``start`` wires the service into a running process (its own, or ``paiq up``).
"""

from __future__ import annotations

from contextlib import AsyncExitStack

from services.submit.app import start_submit
from shared.bus.base import Bus
from shared.db.store import Store
from shared.runtime.vitals import Vitals
from shared.settings.model import Settings


async def start(stack: AsyncExitStack, settings: Settings, store: Store, bus: Bus, vitals: Vitals) -> None:
    runner = await start_submit(settings, store, bus, vitals)
    stack.push_async_callback(runner.cleanup)
