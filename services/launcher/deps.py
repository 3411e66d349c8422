"""What the launcher's handlers are given: the node's settings and its connections, fixed for the
process's life, and (apart, in :mod:`services.launcher.inflight`) its work in flight."""

from __future__ import annotations

from dataclasses import dataclass, field

import structlog

from services.launcher.engine.driver import ContainerDriver
from services.launcher.inflight import InFlight
from shared.bus.base import Bus
from shared.db.logs import LogStore
from shared.db.profiles import ProfileStore
from shared.db.store import Store
from shared.errors import BusError
from shared.events import CloudEvent
from shared.settings.model import LauncherSettings, NodeSettings, Settings
from shared.storageconfig import NO_STORAGES, StorageConfigs

log = structlog.get_logger("paiq.launcher")


@dataclass(frozen=True)
class LauncherDeps:
    settings: Settings
    store: Store
    bus: Bus
    driver: ContainerDriver
    logs: LogStore
    storages: StorageConfigs = NO_STORAGES  # the operator's (PAIQ_STORAGE_CONFIG), read at start
    work: InFlight = field(default_factory=InFlight, repr=False, compare=False)

    @property
    def node(self) -> NodeSettings:
        return self.settings.node

    @property
    def address(self) -> str:
        """Where this node's tasks are reached: PAIQ_NODE_IP, else as :func:`services.launcher.tasknetwork.
        with_address` resolved it at start (the task network's gateway), else loopback (host networking)."""
        return self.settings.node.ip or "127.0.0.1"

    @property
    def options(self) -> LauncherSettings:
        return self.settings.launcher

    @property
    def profiles(self) -> ProfileStore:
        return self.store.profiles

    async def publish(self, events: list[CloudEvent]) -> bool:
        """Publish now (outside a handler's reply); a bus failure is logged, the reconcile pass repairs it.
        False: not published."""
        if not events:
            return True
        try:
            await self.bus.publish(events)
        except BusError as e:
            log.warning("could not publish; the next reconcile pass reports it again", error=str(e))
            return False
        return True
