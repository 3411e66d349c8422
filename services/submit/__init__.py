"""The submit service: paiq's OpenPAI-compatible REST API.

app.py wires it (deps.py: what the handlers are given); the routes are in routes/, one module per
resource; what they promise (the Route type, bodies, answers, errors, the OpenAPI document and the job
config's schema in it, the headers every answer carries) in contract/; users.py keeps the users and tokens,
throttle.py the anonymous callers' budget of heavy reads, loginguard.py the policy that slows guessed passwords
(used at the routes by routes/passwords.py).

``start`` wires the service into a running process (its own, or ``paiq up``).
"""

from __future__ import annotations

import sys
from contextlib import AsyncExitStack

from services.submit.app import start_submit
from services.submit.atrest import seal_at_rest
from shared.bus.base import Bus
from shared.db.store import Store
from shared.ops.vitals import Vitals
from shared.settings.model import Settings

# How long a thread keeps the interpreter before the event loop may take it back (Python's default: 5 ms).
# Submit judges bodies in a worker thread (a megabyte of YAML is half a second of pure Python); at 5 ms a
# read answered meanwhile waited for the interpreter at every await, and a list's p99 reached 190-230 ms;
# at 1 ms it was 60 ms, for 35% more wall time on such a body (tests/benchmarks/worst_job.py, yaml-values).
SWITCH_INTERVAL_S = 0.001


async def start(stack: AsyncExitStack, settings: Settings, store: Store, bus: Bus, vitals: Vitals) -> None:
    sys.setswitchinterval(SWITCH_INTERVAL_S)  # the process's (paiq up: every service's, all of them loops)
    await seal_at_rest(store, settings.secrets_key)  # before the API: job keys in clear sealed, a new key's pass
    runner = await start_submit(settings, store, bus, vitals)
    stack.push_async_callback(runner.cleanup)
