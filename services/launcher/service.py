"""The launcher agent: registers its node, starts the tasks placed on it, reports every exit.

Docker is the truth about containers: a launch first looks for the task's container by its
deterministic name, so a redelivered launch never starts a second one, and on start the agent
reports the exits it missed while it was down.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path

import structlog

from services.launcher.authfile import read_auth_file
from services.launcher.driver import ContainerDriver, ContainerExit, ContainerInfo, ContainerSpec
from shared.bus.base import Bus, Router
from shared.errors import DriverError
from shared.events import (
    CloudEvent,
    JobCompleted,
    LaunchTasks,
    NodeRegistered,
    NodeRegisteredData,
    TaskExited,
    TaskExitedData,
    TaskStarted,
    TaskStartedData,
)
from shared.launchspec import container_name
from shared.records import GpuInfo, NodeRecord, TaskSpec, now_ms
from shared.runtime import start_background, start_periodic
from shared.settings import NodeSettings, Settings
from shared.store import Store

log = structlog.get_logger("paiq.launcher")

EXIT_OOM = -1200
EXIT_CONFIG = -1100
LOG_TAIL_LINES = 20


@dataclass
class LauncherDeps:
    settings: Settings
    store: Store
    bus: Bus
    driver: ContainerDriver
    pulls: dict[str, asyncio.Task[None]] = field(default_factory=dict)

    @property
    def node(self) -> NodeSettings:
        return self.settings.node


def _labels(spec: TaskSpec, node_id: str) -> dict[str, str]:
    return {
        "paiq.job": spec.job_id, "paiq.user": spec.user, "paiq.vc": spec.virtual_cluster,
        "paiq.role": spec.role, "paiq.index": str(spec.index), "paiq.attempt": str(spec.attempt),
        "paiq.node": node_id, "paiq.debug": "1" if spec.is_debug else "0",
    }


def _exited(spec: TaskSpec, node_id: str, code: int, reason: str) -> TaskExited:
    return TaskExited(subject=spec.job_id, data=TaskExitedData(
        job_id=spec.job_id, attempt=spec.attempt, role=spec.role, index=spec.index, node_id=node_id,
        exit_code=code, reason=reason))


async def _ensure_image(deps: LauncherDeps, spec: TaskSpec) -> None:
    """Pull the image if the node lacks it; concurrent tasks needing one image share one pull."""
    if await deps.driver.has_image(spec.image):
        return
    pull = deps.pulls.get(spec.image)
    if pull is None or pull.done():
        auth = read_auth_file(spec.auth_file) if spec.auth_file else None
        log.info("pulling image", image=spec.image, with_auth=auth is not None)
        pull = asyncio.create_task(deps.driver.pull(spec.image, auth))
        deps.pulls[spec.image] = pull
    await asyncio.shield(pull)


async def launch_task(deps: LauncherDeps, spec: TaskSpec) -> CloudEvent | None:
    node_id = deps.node.node_id
    name = container_name(spec.job_id, spec.attempt, spec.role, spec.index)
    existing = await deps.driver.find(name)
    if existing is not None:
        log.info("task already has a container; not starting another", container=name)
        return _started(spec, node_id, existing.id) if existing.running else None
    job = await deps.store.get_job(spec.job_id)
    if job is None or job.state.is_final or job.attempt != spec.attempt:
        log.info("launch skipped: the job is gone, over or on another attempt", job_id=spec.job_id)
        return None
    if spec.code_dir and not await asyncio.to_thread(Path(spec.code_dir).is_dir):
        return _exited(spec, node_id, EXIT_CONFIG, f"codeDir {spec.code_dir} does not exist or is not a directory")
    try:
        await _ensure_image(deps, spec)
        container_id = await deps.driver.run(ContainerSpec(
            name=name, image=spec.image, command=spec.command, env=spec.env,
            labels=_labels(spec, node_id), cpus=spec.cpus, memory_mb=spec.memory_mb,
            shm_mb=spec.shm_mb, gpus=spec.gpus, code_dir=spec.code_dir))
    except DriverError as e:
        log.warning("task could not start", role=spec.role, index=spec.index, reason=e.reason)
        return _exited(spec, node_id, e.exit_code, e.reason)
    log.info("task started", role=spec.role, index=spec.index, container=container_id[:12])
    return _started(spec, node_id, container_id)


def _started(spec: TaskSpec, node_id: str, container_id: str) -> TaskStarted:
    return TaskStarted(subject=spec.job_id, data=TaskStartedData(
        job_id=spec.job_id, attempt=spec.attempt, role=spec.role, index=spec.index,
        node_id=node_id, container_id=container_id))


async def on_launch(evt: LaunchTasks, deps: LauncherDeps) -> list[CloudEvent]:
    results = await asyncio.gather(*(launch_task(deps, spec) for spec in evt.data.tasks))
    return [r for r in results if r is not None]


async def report_exit(deps: LauncherDeps, ex: ContainerExit | ContainerInfo) -> list[CloudEvent]:
    """Turn a container's end into task.exited, keep its last lines, and remove it."""
    labels = ex.labels
    if "paiq.job" not in labels:
        return []
    code = EXIT_OOM if ex.oom_killed else (ex.exit_code if ex.exit_code is not None else -1)
    tail = await deps.driver.logs_tail(ex.id, LOG_TAIL_LINES)
    reason = "out of memory" if ex.oom_killed else ("" if code == 0 else f"command exited with code {code}")
    if not (labels.get("paiq.debug") == "1" and code != 0):
        await deps.driver.remove(ex.id)
    log.info("task exited", job_id=labels["paiq.job"], role=labels.get("paiq.role"),
             index=labels.get("paiq.index"), exit_code=code)
    return [TaskExited(subject=labels["paiq.job"], data=TaskExitedData(
        job_id=labels["paiq.job"], attempt=int(labels.get("paiq.attempt", "0")),
        role=labels.get("paiq.role", ""), index=int(labels.get("paiq.index", "0")),
        node_id=deps.node.node_id, exit_code=code, reason=reason, diagnostics=tail[-4000:],
        container_id=ex.id))]


async def on_job_completed(evt: JobCompleted, deps: LauncherDeps) -> list[CloudEvent]:
    """Stop what is left of a completed job on this node; the exits are reported as they come."""
    leftovers = [c for c in await deps.driver.list_managed(deps.node.node_id)
                 if c.running and c.labels.get("paiq.job") == evt.data.job_id]
    await asyncio.gather(*(deps.driver.stop(c.id, deps.settings.stop_grace_seconds) for c in leftovers))
    if leftovers:
        log.info("stopped leftover tasks of a completed job", job_id=evt.data.job_id, count=len(leftovers))
    return []


async def reconcile(deps: LauncherDeps) -> list[CloudEvent]:
    """Report containers that ended unseen (while the agent was down); stop those of final jobs."""
    events: list[CloudEvent] = []
    for c in await deps.driver.list_managed(deps.node.node_id):
        if not c.running:
            if c.labels.get("paiq.debug") == "1" and c.exit_code:
                continue  # kept on purpose for debugging
            events.extend(await report_exit(deps, c))
            continue
        job = await deps.store.get_job(c.labels.get("paiq.job", ""))
        if job is None or job.state.is_final or str(job.attempt) != c.labels.get("paiq.attempt"):
            await deps.driver.stop(c.id, deps.settings.stop_grace_seconds)
    return events


def node_record(node: NodeSettings) -> NodeRecord:
    return NodeRecord(
        id=node.node_id, ip=node.ip, cpus=node.cpus, memory_mb=node.memory_mb,
        gpus=tuple(GpuInfo(index=i, type=t) for i, t in node.gpus), port_range=node.port_range,
        heartbeat_ms=now_ms(),
    )


async def start_launcher(stack: AsyncExitStack, deps: LauncherDeps) -> None:
    node_id = deps.node.node_id

    async def follow_exits() -> None:
        while True:
            try:
                async for ex in deps.driver.exits():
                    await deps.bus.publish(await report_exit(deps, ex))
            except DriverError as e:
                log.error("lost the engine's event stream; reconnecting", reason=e.reason)
                await asyncio.sleep(1)
                await deps.bus.publish(await reconcile(deps))

    async def launch(evt: LaunchTasks) -> Sequence[CloudEvent]:
        return await on_launch(evt, deps)

    async def completed(evt: JobCompleted) -> Sequence[CloudEvent]:
        return await on_job_completed(evt, deps)

    start_background(stack, f"launcher-exits-{node_id}", follow_exits())
    await deps.bus.publish(await reconcile(deps))
    router = Router()
    router.on(LaunchTasks, launch)
    router.on(JobCompleted, completed)
    await deps.bus.subscribe(f"{deps.settings.queue_prefix}.launcher.{node_id}",
                             [f"node.{node_id}.#", "job.completed"], router)
    await deps.store.upsert_node(node_record(deps.node))
    await deps.bus.publish([NodeRegistered(data=NodeRegisteredData(node_id=node_id))])

    async def heartbeat() -> None:
        await deps.store.heartbeat(node_id)
        await deps.bus.publish(await reconcile(deps))

    start_periodic(stack, f"launcher-heartbeat-{node_id}", deps.settings.reconcile_seconds, heartbeat)
    log.info("launcher started", node=node_id, ip=deps.node.ip, cpus=deps.node.cpus,
             memory_mb=deps.node.memory_mb, gpus=len(deps.node.gpus))
