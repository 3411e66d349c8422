"""What the submit service's handlers are given (typed, frozen; no context dicts)."""

from __future__ import annotations

from dataclasses import dataclass

from aiohttp import web

from services.submit.users import Users
from shared.bus.base import Bus
from shared.settings import Settings
from shared.store import Store


@dataclass(frozen=True)
class SubmitDeps:
    settings: Settings
    store: Store
    bus: Bus
    users: Users


DEPS = web.AppKey("deps", SubmitDeps)
