"""The launcher agent: registers its node, starts the tasks placed on it, reports every exit.

Docker and MongoDB are the truth, the process remembers nothing that matters: on start and on a
timer :func:`services.launcher.reconcile.reconcile` adopts running containers, reports exits missed
while down, stops containers of jobs that are over and launches placed tasks that have none.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from contextlib import AsyncExitStack

import structlog

from services.launcher.deps import LauncherDeps
from services.launcher.diskwatch import check_disks
from services.launcher.engine.tasklabels import TaskLabels
from services.launcher.finish import finish
from services.launcher.launch import launch_and_report
from services.launcher.profiling.gpureader import GpuReader
from services.launcher.profiling.sampling import Sampler
from services.launcher.reconcile import launch_of, reconcile
from services.launcher.stopping import stop_job_containers
from services.launcher.tasknetwork import with_address
from shared.bus.base import Router, consume
from shared.events import (
    CloudEvent,
    JobCompleted,
    JobRetrying,
    LaunchTasks,
    NodeRegistered,
    NodeRegisteredData,
    RelaunchTask,
    StopTasks,
)
from shared.ops.metrics import count_launch_failures_from_zero
from shared.ops.vitals import Vitals
from shared.records import GpuInfo, NodeRecord, now_ms
from shared.settings.model import NodeSettings
from shared.tasks.launchspec import ref_container_name

log = structlog.get_logger("paiq.launcher")


async def on_launch(evt: LaunchTasks, deps: LauncherDeps) -> list[CloudEvent]:
    """Start the tasks in the background and let the message be acked now: a pull may take longer than
    the broker lets a message stay unacked. If this process dies first, its reconcile finds the placed
    tasks without a container and launches them; a launch that arrives twice starts one container."""
    for spec in evt.data.tasks:
        name = ref_container_name(spec)
        deps.work.spawn(f"launch-{name}", launch_and_report(deps, spec, evt.data.job_env))
    return []



async def on_relaunch(evt: RelaunchTask, deps: LauncherDeps) -> list[CloudEvent]:
    """Run a task again on this node (its earlier run failed and taskRetryCount allows another), with its
    launch's environment rebuilt from the job as stored; in the background, as a launch. A command for a
    run that is not the task's current one is dropped by the launch's own decision."""
    d = evt.data
    job = await deps.store.get_job(d.job_id)
    launch = None if job is None else launch_of(job, deps.settings.default_fs_uri)
    if launch is None:
        log.info("relaunch skipped: the job is gone or not placed", job_id=d.job_id, role=d.role, index=d.index)
        return []
    spec = launch.spec(d.role, d.index, d.task_attempt)
    log.info("running a task again", job_id=d.job_id, role=d.role, index=d.index, task_attempt=d.task_attempt,
             why=d.reason)
    deps.work.spawn(f"launch-{ref_container_name(spec)}", launch_and_report(deps, spec, launch.job_env))
    return []


async def _ignored(_: CloudEvent) -> Sequence[CloudEvent]:
    return []  # stops come as node.<id>.stop commands now


async def on_stop(evt: StopTasks, deps: LauncherDeps) -> list[CloudEvent]:
    """Stop what is left of a job on this node (of one failed attempt, or of every attempt once the job is
    over); the exits are reported as they come. A job its user stopped: its tasks' exits say -210."""
    # Only that attempt's when one is named: a late or redelivered command must never stop the next's.
    count = await stop_job_containers(deps, evt.data.job_id, by_user=evt.data.by_user, attempt=evt.data.attempt)
    if count:
        log.info("stopped the job's containers on this node", job_id=evt.data.job_id, count=count,
                 attempt=evt.data.attempt, by_user=evt.data.by_user, reason=evt.data.reason)
    return []


def launcher_bindings(node_id: str) -> list[str]:
    """The launcher's queue takes the commands to its node (``node.<id>.launch``, ``.stop``, ``.relaunch``)."""
    return [f"node.{node_id}.#"]


def launcher_router(deps: LauncherDeps) -> Router:
    """The commands a launcher carries out (shared/schemas/EVENTS.md's consumers are checked against it)."""

    async def launch(evt: LaunchTasks) -> Sequence[CloudEvent]:
        return await on_launch(evt, deps)

    async def stop(evt: StopTasks) -> Sequence[CloudEvent]:
        return await on_stop(evt, deps)

    async def relaunch(evt: RelaunchTask) -> Sequence[CloudEvent]:
        return await on_relaunch(evt, deps)

    router = Router()
    router.on(LaunchTasks, launch)
    router.on(StopTasks, stop)
    router.on(RelaunchTask, relaunch)
    for old in (JobCompleted, JobRetrying):  # a queue declared by an older launcher is still bound to these
        router.on(old, _ignored)
    return router


def follow_exits(deps: LauncherDeps, vitals: Vitals, name: str) -> Callable[[], Awaitable[None]]:
    """The loop that finishes every container of this node that dies (log saved, exit reported, removed).
    When the engine's event stream breaks, vitals runs it again after a backoff; each time but the first
    it starts with a reconcile pass, for the exits missed meanwhile."""
    node_id = deps.node.node_id
    first = True

    async def run() -> None:
        nonlocal first
        if not first:
            await reconcile(deps)
        first = False
        vitals.ok(name)
        async for ex in deps.driver.exits():
            task = TaskLabels.from_labels(ex.labels)
            if task is not None and task.node == node_id:
                deps.work.spawn(f"finish-{ex.id[:12]}", finish(deps, ex))
        raise ConnectionError("the engine's event stream ended")

    return run


def node_record(node: NodeSettings, gpus: tuple[GpuInfo, ...] | None = None) -> NodeRecord:
    """The node as it registers: its settings, and its GPUs as discovered (shared.scheduling.gpuinventory.choose), else
    as declared."""
    return NodeRecord(
        id=node.node_id, ip=node.ip or "127.0.0.1", cpus=node.cpus, memory_mb=node.memory_mb,
        gpus=gpus if gpus is not None else tuple(GpuInfo(index=i, type=t) for i, t in node.gpus),
        port_range=node.port_range, heartbeat_ms=now_ms(),
    )


async def start_launcher(stack: AsyncExitStack, deps: LauncherDeps, vitals: Vitals,
                         gpu_reader: GpuReader | None = None, gpus: tuple[GpuInfo, ...] | None = None) -> LauncherDeps:
    """``gpu_reader``: the node's GPUs read for profiling (None: not measured); ``gpus``: the inventory it
    registers (None: PAIQ_NODE_GPUS as declared). The deps it runs with: ``deps`` with the node's address
    settled (:mod:`services.launcher.tasknetwork`)."""
    deps = await with_address(deps)
    node_id = deps.node.node_id
    count_launch_failures_from_zero(node_id)
    stack.push_async_callback(deps.work.close)
    await deps.logs.ensure_indexes()
    await deps.profiles.ensure_indexes()

    exits = f"launcher-exits-{node_id}"
    vitals.background(stack, exits, follow_exits(deps, vitals, exits))
    await reconcile(deps)
    router = launcher_router(deps)
    # cancelled on the way out before the exits' follower and the work in flight stop
    await consume(stack, deps.bus, f"{deps.settings.queue_prefix}.launcher.{node_id}", launcher_bindings(node_id),
                  router)
    await deps.store.upsert_node(node_record(deps.node, gpus))
    await deps.bus.publish([NodeRegistered(data=NodeRegisteredData(node_id=node_id))])

    async def heartbeat() -> None:
        await deps.store.heartbeat(node_id)

    async def reconcile_round() -> None:
        await reconcile(deps)

    # Apart from reconcile, so a slow engine never makes a live node look lost.
    vitals.periodic(stack, f"launcher-heartbeat-{node_id}", deps.settings.node_timeout_seconds / 4, heartbeat)
    vitals.periodic(stack, f"launcher-reconcile-{node_id}", deps.settings.reconcile_seconds, reconcile_round)
    if deps.options.disk_limit_mb > 0:
        async def disk_round() -> None:
            await check_disks(deps)

        vitals.periodic(stack, f"launcher-disks-{node_id}", deps.options.disk_check_seconds, disk_round)
    if deps.options.profile_seconds > 0:
        sampler = Sampler(deps, gpu_reader, deps.profiles)
        vitals.periodic(stack, f"launcher-sampling-{node_id}", deps.options.profile_seconds, sampler.round)
    log.info("launcher started", node=node_id, ip=deps.address, cpus=deps.node.cpus,
             memory_mb=deps.node.memory_mb, gpus=len(gpus) if gpus is not None else len(deps.node.gpus),
             network=deps.options.network, profile_seconds=deps.options.profile_seconds)
    return deps
