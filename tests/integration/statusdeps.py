"""The status service's dependencies over a real store, as its process builds them, for tests that call its
handlers directly."""

from __future__ import annotations

from services.status.service import StatusDeps, retry_policy
from shared.bus.memory import MemoryBus
from shared.db.store import Store
from shared.settings.model import Settings
from tests.infra import unique


def status_deps(store: Store, **env: str) -> StatusDeps:
    """``env``: settings beside a queue prefix of its own (``PAIQ_RETRY_BACKOFF_MS="0"``, ...)."""
    settings = Settings.from_env({"PAIQ_QUEUE_PREFIX": unique("status"), **env})
    return StatusDeps(settings=settings, store=store, bus=MemoryBus(), policy=retry_policy(settings))
