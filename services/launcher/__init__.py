"""The launcher: one agent per node, running each task of the node in a Docker container.

The flow is at the top: service.py (the agent), deps.py, decide.py (what to do about a task, pure),
inflight.py, launch.py, finish.py, reconcile.py, stopping.py, recorder.py (a container's logs) and
exits.py (what an exit means); the container engine is in engine/, what goes into a task's container in
container/, the profiler and the node's GPUs in profiling/.

``start`` wires the service into a running process (its own, or ``paiq up``).
"""

from __future__ import annotations

from contextlib import AsyncExitStack

from services.launcher.deps import LauncherDeps
from services.launcher.engine.docker_driver import DockerDriver
from services.launcher.profiling.gpus import discover
from services.launcher.service import start_launcher
from shared.bus.base import Bus
from shared.db.logs import LogStore
from shared.db.store import Store
from shared.ops.vitals import Vitals
from shared.settings.model import Settings
from shared.storageconfig import load_storage_configs


async def start(stack: AsyncExitStack, settings: Settings, store: Store, bus: Bus, vitals: Vitals) -> None:
    driver = DockerDriver.from_url(settings.docker_url)
    stack.push_async_callback(driver.close)
    logs = LogStore(store.jobs.database)
    gpus, reader = discover(settings)
    if reader is not None:
        stack.callback(reader.close)
    storages = load_storage_configs(settings.storage_config_path)  # a bad file stops the launcher at start
    await start_launcher(stack, LauncherDeps(settings=settings, store=store, bus=bus, driver=driver, logs=logs,
                                             storages=storages),
                         vitals, reader, gpus.gpus)
