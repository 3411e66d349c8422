"""The launcher agent: registers its node, starts the tasks placed on it, reports every exit.

Docker and MongoDB are the truth, the process remembers nothing that matters: on start and on a
timer :func:`services.launcher.reconcile.reconcile` adopts running containers, reports exits missed
while down, stops containers of jobs that are over and launches placed tasks that have none.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from contextlib import AsyncExitStack

import structlog

from services.launcher.deps import LauncherDeps
from services.launcher.finish import finish
from services.launcher.launch import launch_task
from services.launcher.reconcile import reconcile
from services.launcher.stopping import stop_job_containers
from shared.bus.base import Router
from shared.errors import DriverError
from shared.events import CloudEvent, JobCompleted, JobRetrying, LaunchTasks, NodeRegistered, NodeRegisteredData
from shared.records import GpuInfo, JobState, NodeRecord, now_ms
from shared.runtime import start_background, start_periodic
from shared.settings import NodeSettings

log = structlog.get_logger("paiq.launcher")


async def on_launch(evt: LaunchTasks, deps: LauncherDeps) -> list[CloudEvent]:
    results = await asyncio.gather(*(launch_task(deps, spec, evt.data.job_env) for spec in evt.data.tasks))
    return [event for events in results for event in events]


async def on_job_completed(evt: JobCompleted, deps: LauncherDeps) -> list[CloudEvent]:
    """Stop what is left of a completed job on this node; the exits are reported as they come.

    A job that ended STOPPED was stopped by its user: its tasks' exits say -210."""
    by_user = evt.data.state is JobState.STOPPED
    count = await stop_job_containers(deps, evt.data.job_id, by_user=by_user)
    if count:
        log.info("stopped the leftover tasks of a completed job", job_id=evt.data.job_id, count=count,
                 by_user=by_user)
    return []


async def on_job_retrying(evt: JobRetrying, deps: LauncherDeps) -> list[CloudEvent]:
    """A failed attempt's tasks still running on this node are stopped before the next attempt starts."""
    # Only that attempt's: a late or redelivered event must never stop the next attempt's tasks.
    count = await stop_job_containers(deps, evt.data.job_id, by_user=False, attempt=evt.data.attempt)
    if count:
        log.info("stopped the leftover tasks of a failed attempt", job_id=evt.data.job_id, count=count,
                 attempt=evt.data.attempt)
    return []


async def follow_exits(deps: LauncherDeps) -> None:
    """Every container of this node that dies is finished (log saved, exit reported, removed)."""
    node_id = deps.node.node_id
    while True:
        try:
            async for ex in deps.driver.exits():
                if ex.labels.get("paiq.node") == node_id:
                    deps.spawn(f"finish-{ex.id[:12]}", finish(deps, ex))
        except DriverError as e:
            log.error("lost the engine's event stream; reconnecting", reason=e.reason)
        await asyncio.sleep(1)
        await reconcile(deps)


def node_record(node: NodeSettings) -> NodeRecord:
    return NodeRecord(
        id=node.node_id, ip=node.ip, cpus=node.cpus, memory_mb=node.memory_mb,
        gpus=tuple(GpuInfo(index=i, type=t) for i, t in node.gpus), port_range=node.port_range,
        heartbeat_ms=now_ms(),
    )


async def start_launcher(stack: AsyncExitStack, deps: LauncherDeps) -> None:
    node_id = deps.node.node_id
    stack.push_async_callback(deps.close)
    await deps.logs.ensure_indexes()

    async def launch(evt: LaunchTasks) -> Sequence[CloudEvent]:
        return await on_launch(evt, deps)

    async def completed(evt: JobCompleted) -> Sequence[CloudEvent]:
        return await on_job_completed(evt, deps)

    async def retrying(evt: JobRetrying) -> Sequence[CloudEvent]:
        return await on_job_retrying(evt, deps)

    start_background(stack, f"launcher-exits-{node_id}", follow_exits(deps))
    await reconcile(deps)
    router = Router()
    router.on(LaunchTasks, launch)
    router.on(JobCompleted, completed)
    router.on(JobRetrying, retrying)
    await deps.bus.subscribe(f"{deps.settings.queue_prefix}.launcher.{node_id}",
                             [f"node.{node_id}.#", "job.completed", "job.retrying"], router)
    await deps.store.upsert_node(node_record(deps.node))
    await deps.bus.publish([NodeRegistered(data=NodeRegisteredData(node_id=node_id))])

    async def heartbeat() -> None:
        await deps.store.heartbeat(node_id)

    async def reconcile_round() -> None:
        await reconcile(deps)

    # Apart from reconcile, so a slow engine never makes a live node look lost.
    start_periodic(stack, f"launcher-heartbeat-{node_id}", deps.settings.node_timeout_seconds / 4, heartbeat)
    start_periodic(stack, f"launcher-reconcile-{node_id}", deps.settings.reconcile_seconds, reconcile_round)
    log.info("launcher started", node=node_id, ip=deps.node.ip, cpus=deps.node.cpus,
             memory_mb=deps.node.memory_mb, gpus=len(deps.node.gpus), network=deps.options.network)
