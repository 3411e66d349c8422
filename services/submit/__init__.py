"""The submit service: paiq's OpenPAI-compatible REST API.

app.py wires it (deps.py: what the handlers are given); the routes are in routes/, one module per
resource; what they promise (the Route type, bodies, answers, errors, the OpenAPI document and the job
config's schema in it) in contract/; users.py keeps the users and tokens, throttle.py the anonymous
callers' budget of heavy reads.

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
