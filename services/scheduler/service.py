"""The scheduler: I/O around the pure queue decision (:mod:`shared.queueing`) and placement.

One scheduler decides at a time: instances compete for a lease in MongoDB, the holder runs the passes,
the others stand by and take over when the lease expires. A pass rebuilds its view of the cluster from
MongoDB, so resources are held exactly as long as the tasks holding them have not ended, whatever
message was lost. Passes run on every event that can change the answer and on a timer; the timer
also finds nodes whose launcher went silent.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import uuid
from collections import Counter, defaultdict
from collections.abc import Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass, field

import structlog

from shared import exitcodes
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
    TaskExited,
    TaskExitedData,
)
from shared.launchspec import placed_tasks, task_specs
from shared.metrics import NODE_GPUS, QUEUE_LENGTH, QUEUE_WAIT, SCHEDULING, VC_GPUS
from shared.placement import ClusterSnapshot, Plan
from shared.queueing import plan_queue, usage_by_vc
from shared.records import JobRecord, TaskSpec, now_ms
from shared.runtime import start_background, start_periodic
from shared.settings import Settings
from shared.store import Store
from shared.vclusters import with_default

log = structlog.get_logger("paiq.scheduler")

LEASE = "scheduler"


@dataclass
class SchedulerDeps:
    settings: Settings
    store: Store
    bus: Bus
    instance: str = field(default_factory=lambda: f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}")
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


async def schedule_pass(deps: SchedulerDeps) -> list[CloudEvent]:
    """Decide the queue (pure), then commit the placements and announce what was decided."""
    async with deps.lock:
        vcs = with_default(await deps.store.list_vcs())
        holding = await deps.store.jobs_holding_resources()
        snapshot = ClusterSnapshot.build(await deps.store.list_nodes(), holding)
        queued = await deps.store.queued_jobs()
        now = now_ms()
        with SCHEDULING.time():
            decision = plan_queue(snapshot, queued, vcs, usage_by_vc(holding), now,
                                  deps.settings.backfill_bound_seconds * 1000)
        events: list[CloudEvent] = []
        plans = {job.id: plan for job, plan in decision.start}
        # Jobs that changed meanwhile (stopped) are not committed; the rest in one round trip.
        for committed in await deps.store.commit_placements([(j, placed_tasks(p)) for j, p in decision.start]):
            plan = plans[committed.id]
            QUEUE_WAIT.labels(committed.virtual_cluster).observe(
                max(0, now - (committed.queued_ms or committed.created_ms)) / 1000)
            events.extend(_scheduled(committed, plan, deps.settings.default_fs_uri))
            log.info("job placed", job_id=committed.id, nodes=sorted({t.node_id for t in plan.tasks}))
        changed = []
        for job in queued:
            wait = decision.waiting.get(job.id)
            if wait is None or (wait.reason, wait.position) == (job.reason, job.queue_position):
                continue
            changed.append((job, wait.reason, wait.position))
            if _cause(wait.reason) != _cause(job.reason):
                events.append(JobWaiting(subject=job.id, data=JobWaitingData(job_id=job.id, reason=wait.reason)))
                log.info("job waits", job_id=job.id, reason=wait.reason)
        await deps.store.set_waiting_reasons(changed)
        _gauge(snapshot, [j for j in queued if j.id in decision.waiting], holding)
        return events


def _cause(reason: str) -> str:
    """A reason without its queue position: moving up the queue is not news worth an event."""
    return reason.split(": ", 1)[-1]


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


def _gauge(snapshot: ClusterSnapshot, waiting: list[JobRecord], holding: list[JobRecord]) -> None:
    QUEUE_LENGTH.clear()
    for vc, n in Counter(j.virtual_cluster for j in waiting).items():
        QUEUE_LENGTH.labels(vc).set(n)
    NODE_GPUS.clear()
    for node in snapshot.nodes:
        used = len(snapshot.usage[node.id].gpus)
        NODE_GPUS.labels(node.id, "allocated").set(used)
        NODE_GPUS.labels(node.id, "free").set(len(node.gpus) - used)
    VC_GPUS.clear()
    for vc, resources in usage_by_vc(holding).items():
        VC_GPUS.labels(vc).set(resources.gpus)


async def detect_lost_nodes(deps: SchedulerDeps) -> list[CloudEvent]:
    """Nodes silent for longer than the timeout are lost: their tasks end with -1001 (node lost, retried
    without using retryCount) and their capacity leaves the cluster until their launcher registers again."""
    timeout_ms = deps.settings.node_timeout_seconds * 1000
    events: list[CloudEvent] = []
    for node in await deps.store.list_nodes():
        if node.lost or not await deps.store.mark_node_lost(node.id, now_ms() - timeout_ms):
            continue
        silent = (now_ms() - node.heartbeat_ms) / 1000
        log.error("node lost: its launcher stopped sending heartbeats", node=node.id, silent_seconds=round(silent))
        reason = f"node {node.id} was lost: no heartbeat from its launcher for {silent:.0f}s"
        for job in await deps.store.jobs_on_node(node.id):
            for task in job.tasks:
                if task.node_id == node.id and not task.state.is_final:
                    events.append(TaskExited(subject=job.id, data=TaskExitedData(
                        job_id=job.id, attempt=job.attempt, role=task.role, index=task.index, node_id=node.id,
                        exit_code=exitcodes.NODE_LOST, reason=reason)))
    return events


async def start_scheduler(stack: AsyncExitStack, deps: SchedulerDeps) -> None:
    """Stand by until this instance holds the lease, then decide; give up the process if it is lost."""
    start_background(stack, "scheduler-lead", _lead(stack, deps))
    stack.push_async_callback(deps.store.release_lease, LEASE, deps.instance)


async def _lead(stack: AsyncExitStack, deps: SchedulerDeps) -> None:
    ttl_ms = deps.settings.lease_seconds * 1000
    said = False
    while not await deps.store.hold_lease(LEASE, deps.instance, ttl_ms):
        if not said:
            log.info("standing by: another scheduler holds the lease", instance=deps.instance)
            said = True
        await asyncio.sleep(deps.settings.lease_seconds / 3)
    log.info("this scheduler leads now", instance=deps.instance)

    async def on_change(_: CloudEvent) -> Sequence[CloudEvent]:
        return await schedule_pass(deps)

    router = Router()
    for kind in (JobSubmitted, NodeRegistered, JobCompleted, JobRequeued):
        router.on(kind, on_change)
    await deps.bus.subscribe(f"{deps.settings.queue_prefix}.scheduler",
                             ["job.submitted", "node.registered", "job.completed", "job.requeued"], router)

    async def periodic() -> None:
        await deps.bus.publish(await detect_lost_nodes(deps))
        await deps.bus.publish(await schedule_pass(deps))

    async def renew() -> None:
        if not await deps.store.hold_lease(LEASE, deps.instance, ttl_ms):
            # Another instance took over (this one was cut off too long): deciding on would make two.
            log.error("lost the scheduler lease; stopping so that only one scheduler decides",
                      instance=deps.instance)
            os.kill(os.getpid(), signal.SIGTERM)

    await periodic()  # jobs that waited while no scheduler ran
    start_periodic(stack, "scheduler-reconcile", deps.settings.reconcile_seconds, periodic)
    start_periodic(stack, "scheduler-lease", deps.settings.lease_seconds / 3, renew)
