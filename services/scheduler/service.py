"""I/O around :func:`shared.placement.place`: read the cluster from MongoDB, commit plans, tell nodes.

One pass at a time (a lock): a pass rebuilds the cluster snapshot from MongoDB, so resources are held
exactly as long as the tasks holding them are not final, and freed when they are, whatever message was
lost. Passes run on every event that can change the answer and on a timer.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass, field

import structlog

from shared.bus.base import Bus, Router
from shared.events import (
    CloudEvent,
    JobCompleted,
    JobRequeued,
    JobScheduled,
    JobScheduledData,
    JobSubmitted,
    JobWaiting,
    JobWaitingData,
    LaunchTasks,
    LaunchTasksData,
    NodeRegistered,
    PlacedTask,
)
from shared.launchspec import placed_tasks, task_specs
from shared.metrics import NODE_GPUS, QUEUE_LENGTH, QUEUE_WAIT, SCHEDULING
from shared.placement import ClusterSnapshot, Plan, place
from shared.records import JobRecord, TaskSpec, now_ms
from shared.runtime import start_periodic
from shared.settings import Settings
from shared.store import Store

log = structlog.get_logger("paiq.scheduler")


@dataclass
class SchedulerDeps:
    settings: Settings
    store: Store
    bus: Bus
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


async def schedule_pass(deps: SchedulerDeps) -> list[CloudEvent]:
    """Try every queued job, oldest first; return the events that announce what was decided."""
    async with deps.lock:
        nodes = await deps.store.list_nodes()
        snapshot = ClusterSnapshot.build(nodes, await deps.store.jobs_holding_resources())
        events: list[CloudEvent] = []
        queued = await deps.store.queued_jobs()
        for job in queued:
            with SCHEDULING.time():
                result = place(snapshot, job.config)
            if isinstance(result, Plan):
                committed = await deps.store.commit_placement(job, placed_tasks(result))
                if committed is None:
                    continue  # the job changed under us (stopped, or placed by another pass)
                snapshot.hold(result, job.config)
                QUEUE_WAIT.labels(job.virtual_cluster).observe(
                    max(0, now_ms() - (job.queued_ms or job.created_ms)) / 1000)
                events.extend(_scheduled(committed, result, deps.settings.default_fs_uri))
                log.info("job placed", job_id=job.id, nodes=sorted({t.node_id for t in result.tasks}))
            elif result.reason != job.reason:
                await deps.store.set_waiting_reason(job, result.reason)
                events.append(JobWaiting(subject=job.id, data=JobWaitingData(job_id=job.id, reason=result.reason)))
                log.info("job waits", job_id=job.id, reason=result.reason)
        _gauge_cluster(snapshot, queued, events)
        return events


def _gauge_cluster(snapshot: ClusterSnapshot, queued: list[JobRecord], events: list[CloudEvent]) -> None:
    placed = {e.subject for e in events if isinstance(e, JobScheduled)}
    QUEUE_LENGTH.clear()
    for job in queued:
        if job.id not in placed:
            QUEUE_LENGTH.labels(job.virtual_cluster).inc()
    NODE_GPUS.clear()
    for node in snapshot.nodes:
        used = len(snapshot.usage[node.id].gpus)
        NODE_GPUS.labels(node.id, "allocated").set(used)
        NODE_GPUS.labels(node.id, "free").set(len(node.gpus) - used)


def _scheduled(job: JobRecord, plan: Plan, default_fs_uri: str) -> list[CloudEvent]:
    by_node: dict[str, list[TaskSpec]] = defaultdict(list)
    for spec, placement in zip(task_specs(job, plan, default_fs_uri), plan.tasks, strict=True):
        by_node[placement.node_id].append(spec)
    events: list[CloudEvent] = [JobScheduled(subject=job.id, data=JobScheduledData(
        job_id=job.id, attempt=job.attempt,
        tasks=tuple(PlacedTask(**t.model_dump()) for t in plan.tasks)))]
    events.extend(
        LaunchTasks(subject=job.id, data=LaunchTasksData(
            job_id=job.id, attempt=job.attempt, node_id=node_id, tasks=tuple(specs)))
        for node_id, specs in by_node.items()
    )
    return events


async def start_scheduler(stack: AsyncExitStack, deps: SchedulerDeps) -> None:
    async def on_change(_: CloudEvent) -> Sequence[CloudEvent]:
        return await schedule_pass(deps)

    router = Router()
    router.on(JobSubmitted, on_change)
    router.on(NodeRegistered, on_change)
    router.on(JobCompleted, on_change)
    router.on(JobRequeued, on_change)
    await deps.bus.subscribe(f"{deps.settings.queue_prefix}.scheduler",
                             ["job.submitted", "node.registered", "job.completed", "job.requeued"], router)

    async def periodic() -> None:
        await deps.bus.publish(await schedule_pass(deps))

    await periodic()  # jobs that waited while no scheduler ran
    start_periodic(stack, "scheduler-reconcile", deps.settings.reconcile_seconds, periodic)
    log.info("scheduler started")
