"""What the submit service's handlers are given (typed, frozen; no context dicts)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from aiohttp import web

from services.submit.users import Users
from shared.bus.base import Bus
from shared.db.store import Store
from shared.ops.vitals import Vitals
from shared.settings.model import Settings


@dataclass(frozen=True)
class SubmitDeps:
    settings: Settings
    store: Store
    bus: Bus
    users: Users
    vitals: Vitals = field(default_factory=Vitals)  # the process's: what /healthz reports
    # Where submissions are judged and their records built, off the event loop (services.submit.routes.jobs):
    # one thread, so that concurrent submissions take turns rather than all contend with the loop.
    cpu: ThreadPoolExecutor = field(
        default_factory=lambda: ThreadPoolExecutor(max_workers=1, thread_name_prefix="paiq-submit-cpu"))


DEPS = web.AppKey("deps", SubmitDeps)
