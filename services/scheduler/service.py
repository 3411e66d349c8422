"""The scheduler: I/O around the pure queue decision (:mod:`shared.scheduling.queueing`) and placement.

One scheduler decides at a time: instances compete for a lease in MongoDB, the holder runs the passes,
the others stand by and take over when the lease expires. A pass rebuilds its view of the cluster from
MongoDB, so resources are held exactly as long as the tasks holding them have not ended, whatever
message was lost. Passes run on every event that can change the answer and on a timer; the timer
also finds nodes whose launcher went silent.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import socket
import time
import uuid
from collections import defaultdict
from collections.abc import Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass, field, replace

import pymongo
import structlog
from pymongo.errors import PyMongoError

from shared.bus.base import Bus, Handler, Router, consume
from shared.db.jobcache import JobCache
from shared.db.journal import split
from shared.db.store import Fence, Store
from shared.errors import LeaseLostError
from shared.events import (
    CloudEvent,
    JobCompleted,
    JobPreempted,
    JobPreemptedData,
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
from shared.jobconfig.priority import priority_name, priority_of
from shared.lifecycle import exitcodes
from shared.ops.metrics import (
    NODE_GPUS,
    NODE_LOST,
    NODES_SILENT,
    PREEMPTION_DECISION,
    PREEMPTIONS,
    QUEUE_DECISION,
    QUEUE_LENGTH,
    QUEUE_WAIT,
    SCHEDULER_PASS,
    VC_BORROWED,
    VC_GPUS,
    VC_LENT,
    VC_QUOTA,
)
from shared.ops.vitals import Vitals, backoff, describe
from shared.records import JobRecord, PreemptedBy, TaskSpec, holds_resources, now_ms
from shared.scheduling.borrowing import borrowed_and_lent, quota_usage
from shared.scheduling.nodeliveness import DatabaseWatch, Heartbeat, judge_nodes
from shared.scheduling.placement import ClusterSnapshot, Plan
from shared.scheduling.preemption.rounds import candidates_of, lineage_after, preemption_round
from shared.scheduling.queueing import (
    QueueDecision,
    Share,
    Shares,
    capacity_of,
    entry_of,
    never_fits_key,
    plan_queue,
    queue_key,
    usage_by_vc,
    user_shares,
)
from shared.scheduling.vclusters import Resources, VirtualCluster, limit, with_default
from shared.settings.model import Settings
from shared.tasks.launchspec import job_launch, placed_tasks

log = structlog.get_logger("paiq.scheduler")

LEASE = "scheduler"
LEAD_LOOP, PASSES_LOOP = "scheduler-lead", "scheduler-passes"
LEADER, STANDBY = "leader", "standby"
RELEASE_SECONDS = 2  # a shutdown waits this long at most to hand the lease over
# The least time between the starts of two passes: events arriving meanwhile are decided together (as Slurm's
# sched_min_interval). A burst of submissions and endings costs a pass per gap, not one per event.
PASS_GAP_SECONDS = 0.1


@dataclass
class SchedulerDeps:
    settings: Settings
    store: Store
    bus: Bus
    instance: str = field(default_factory=lambda: f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}")
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    # Set by every event that can change the answer; the pass loop runs once more for any number of them.
    wanted: asyncio.Event = field(default_factory=asyncio.Event)
    # Whether a queued job could start even on an idle cluster, for the cluster shape it was decided on.
    never_fits: dict[str, bool] = field(default_factory=dict)
    shape: str = ""
    # The users' shares the last pass ordered by, as stored for the queue's readers (written when changed).
    shares: dict[str, dict[str, Share]] | None = None
    # Set once this instance leads: its commits are fenced by the lease (see Store.commit_placements).
    fence: Fence | None = None
    lost: asyncio.Event = field(default_factory=asyncio.Event)  # set when the lease is lost while leading
    vitals: Vitals = field(default_factory=Vitals)
    # This scheduler's view of the database, and why silent nodes are spared now (see detect_lost_nodes).
    db_watch: DatabaseWatch = field(default_factory=DatabaseWatch)
    held_back: str | None = None
    jobs: JobCache = field(default_factory=JobCache)  # the pass's jobs, decoded, read whole only when they change


async def schedule_pass(deps: SchedulerDeps) -> list[CloudEvent]:
    """Decide the queue (pure), then commit the placements and announce what was decided."""
    async with deps.lock:
        with SCHEDULER_PASS.time():
            return await _decide_and_commit(deps)


async def _decide_and_commit(deps: SchedulerDeps) -> list[CloudEvent]:
    vcs = with_default(await deps.store.list_vcs())
    holding = await deps.store.jobs_holding_resources(deps.jobs)
    snapshot = ClusterSnapshot.build(await deps.store.list_nodes(), holding)
    shape = _shape(snapshot, vcs)
    if shape != deps.shape:  # nodes or quotas changed: what could never fit may fit now
        deps.shape, deps.never_fits = shape, {}
        unparked = await deps.store.unpark_queued()
        if unparked:
            log.info("the cluster changed: jobs that could not fit are looked at again", jobs=unparked)
    queued = await deps.store.queued_jobs(deps.jobs)  # parked jobs left out: a standing queue costs nothing
    capacity = capacity_of(snapshot)
    shares = user_shares(holding, vcs, capacity)
    if shares != deps.shares:  # what reads derive queue positions from: the order this pass decides in
        await deps.store.set_queue_shares(shares)
        deps.shares = shares
    now = now_ms()
    used = quota_usage(holding)
    _gauge_borrowing(vcs, capacity, used)
    with QUEUE_DECISION.time():
        decision = plan_queue(snapshot, queued, vcs, used, now,
                              deps.settings.backfill_bound_seconds * 1000, deps.never_fits, shares)
    deps.never_fits = decision.never_fits
    commands = await _commit(deps, decision, now)  # the events of the pass are journaled with its writes
    await _preempt(deps, snapshot, queued, holding, vcs, used, decision, shares, now)
    await _record_waiting(deps, queued, decision)
    _gauge(snapshot, holding)
    return commands


async def _preempt(deps: SchedulerDeps, snapshot: ClusterSnapshot, queued: list[JobRecord], holding: list[JobRecord],
                   vcs: dict[str, VirtualCluster], used: dict[str, Resources], decision: QueueDecision,
                   shares: Shares, now: int) -> None:
    """The pass's preemption round (pure, :mod:`shared.scheduling.preemption.rounds`) over the jobs still waiting, in
    the queue's order across VCs; the victims are marked on their records (fenced by the lease) and
    announced with ``job.preempted``: the status service ends their attempts. The waiting jobs' reasons
    say what was decided for them."""
    waiting = sorted((j for j in queued if j.id in decision.waiting and decision.waiting[j.id].may_preempt),
                     key=lambda j: queue_key(entry_of(j), shares))
    if not waiting or deps.settings.preemptions_per_pass == 0:
        return
    running = candidates_of(holding, vcs, capacity_of(snapshot))
    with PREEMPTION_DECISION.time():
        decided = preemption_round(snapshot, waiting, running, vcs, used, tries=deps.settings.preemptions_per_pass)
    for job_id, reason in decided.reasons.items():
        decision.waiting[job_id] = replace(decision.waiting[job_id], reason=reason)
    by_id = {j.id: j for j in (*holding, *queued)}
    for preemption in decided.preemptions:
        job = by_id[preemption.job_id]
        marks = [(by_id[v.job_id], PreemptedBy(attempt=by_id[v.job_id].attempt, by=job.id, by_vc=job.virtual_cluster,
                                               by_priority=priority_name(priority_of(job.config)), why=v.why,
                                               at_ms=now), lineage_after(by_id[v.job_id], job))
                 for v in preemption.victims]
        announce: dict[str, list[CloudEvent]] = {victim.id: [_preempted_event(victim, job, mark)]
                                                 for victim, mark, _ in marks}
        marked = await deps.store.mark_preempted(marks, deps.fence, announce)  # journaled with the marks
        log.warning("preempting jobs to make room for a waiting job", job_id=job.id, vc=job.virtual_cluster,
                    victims=[f"{v.job_id} ({v.why})" for v in preemption.victims], marked=len(marked),
                    gpus_freed=preemption.freed.gpus, gpus_needed=preemption.needed.gpus,
                    gpus_beyond_need=preemption.unused_gpus)
        for victim in marked:
            PREEMPTIONS.labels(victim.virtual_cluster, job.virtual_cluster).inc()


def _preempted_event(victim: JobRecord, job: JobRecord, mark: PreemptedBy) -> JobPreempted:
    """``job.preempted`` of ``victim`` for ``job``, journaled with the mark on the victim."""
    return JobPreempted(subject=victim.id, data=JobPreemptedData(
        job_id=victim.id, attempt=mark.attempt, virtual_cluster=victim.virtual_cluster, by_job_id=job.id,
        by_virtual_cluster=job.virtual_cluster, by_priority=mark.by_priority, reason=mark.why))


def _gauge_borrowing(vcs: dict[str, VirtualCluster], capacity: Resources, used: dict[str, Resources]) -> None:
    VC_BORROWED.clear()
    VC_LENT.clear()
    VC_QUOTA.clear()
    for vc, (borrowed, lent) in borrowed_and_lent(vcs, capacity, used).items():
        for resource in ("gpus", "cpus", "memory_mb"):
            VC_QUOTA.labels(vc, resource).set(getattr(limit(vcs[vc], capacity), resource))
            VC_BORROWED.labels(vc, resource).set(getattr(borrowed, resource))
            VC_LENT.labels(vc, resource).set(getattr(lent, resource))


async def _commit(deps: SchedulerDeps, decision: QueueDecision, now: int) -> list[CloudEvent]:
    """Commit the placements in one round trip (a job that changed meanwhile, e.g. was stopped, is left
    out) and announce each: ``job.scheduled``, journaled with the placement, and one launch command per node,
    published now (the commands to publish)."""
    commands: list[CloudEvent] = []
    plans = {job.id: plan for job, plan in decision.start}
    announced = {job.id: split(_scheduled(job, plan, deps.settings.default_fs_uri)) for job, plan in decision.start}
    placements = [(j, placed_tasks(p)) for j, p in decision.start]
    for committed in await deps.store.commit_placements(placements, deps.fence,
                                                         {job_id: kept for job_id, (kept, _) in announced.items()}):
        plan = plans[committed.id]
        QUEUE_WAIT.labels(committed.virtual_cluster).observe(
            max(0, now - (committed.queued_ms or committed.created_ms)) / 1000)
        commands.extend(announced[committed.id][1])
        log.info("job placed", job_id=committed.id, nodes=sorted({t.node_id for t in plan.tasks}))
    return commands


async def _record_waiting(deps: SchedulerDeps, queued: list[JobRecord], decision: QueueDecision) -> None:
    """Store why each job waits, only where that changed: moving up the queue changes nothing stored. A
    job that could not start even on the idle cluster is parked: later passes do not read it until the
    cluster changes."""
    changed = []
    announce: dict[str, list[CloudEvent]] = {}
    for job in queued:
        wait = decision.waiting.get(job.id)
        if wait is None:
            continue
        parked = decision.never_fits.get(never_fits_key(job), False)
        if (wait.reason, parked) == (job.reason, job.parked):
            continue
        changed.append((job, wait.reason, parked))
        if wait.reason != job.reason:
            announce[job.id] = [JobWaiting(subject=job.id, data=JobWaitingData(job_id=job.id, reason=wait.reason))]
            log.info("job waits", job_id=job.id, reason=wait.reason)
    await deps.store.set_waiting_reasons(changed, announce)  # the events journaled with the reasons


def _shape(snapshot: ClusterSnapshot, vcs: dict[str, VirtualCluster]) -> str:
    """What decides whether a job could ever fit: the live nodes' capacities and the VCs' quotas."""
    nodes = sorted((n.id, n.cpus, n.memory_mb, tuple((g.index, g.type) for g in n.gpus), n.port_range)
                   for n in snapshot.nodes)
    quotas = sorted((v.name, v.model_dump_json(include={"quota", "borrowing"})) for v in vcs.values())
    return hashlib.sha256(repr((nodes, quotas)).encode()).hexdigest()


def _scheduled(job: JobRecord, plan: Plan, default_fs_uri: str) -> list[CloudEvent]:
    """``job.scheduled`` and one launch command per node. The job's shared environment (peers' hosts and
    ports included) is built once and sent once per node; each task carries only its own variables."""
    launch = job_launch(job, plan, default_fs_uri)
    by_node: dict[str, list[TaskSpec]] = defaultdict(list)
    for placement in plan.tasks:
        by_node[placement.node_id].append(launch.spec(placement.role, placement.index))
    events: list[CloudEvent] = [JobScheduled(subject=job.id, data=JobScheduledData(
        job_id=job.id, attempt=job.attempt,
        tasks=tuple(PlacedTask(role=t.role, index=t.index, node_id=t.node_id, ip=t.ip, gpus=t.gpus, ports=t.ports)
                    for t in plan.tasks)))]
    events.extend(
        LaunchTasks(subject=job.id, data=LaunchTasksData(
            job_id=job.id, attempt=job.attempt, node_id=node_id, tasks=tuple(specs), job_env=launch.job_env))
        for node_id, specs in by_node.items()
    )
    return events


def _gauge(snapshot: ClusterSnapshot, holding: list[JobRecord]) -> None:
    NODE_GPUS.clear()
    for node in snapshot.nodes:
        used = len(snapshot.usage[node.id].gpus)
        NODE_GPUS.labels(node.id, "allocated").set(used)
        NODE_GPUS.labels(node.id, "free").set(len(node.gpus) - used)
    VC_GPUS.clear()
    for vc, resources in usage_by_vc(holding).items():
        VC_GPUS.labels(vc).set(resources.gpus)


async def _gauge_queues(deps: SchedulerDeps) -> None:
    """Queue length per VC, parked jobs included (on the timer: the passes do not read parked jobs)."""
    lengths = await deps.store.queue_lengths()
    QUEUE_LENGTH.clear()
    for vc, n in lengths.items():
        QUEUE_LENGTH.labels(vc).set(n)


async def detect_lost_nodes(deps: SchedulerDeps) -> list[CloudEvent]:
    """Nodes silent for longer than the timeout are lost: their tasks end with -1001 (node lost, retried
    without using retryCount) and their capacity leaves the cluster until their launcher registers again.
    Which silent nodes are lost is judged by :func:`shared.scheduling.nodeliveness.judge_nodes`, against this
    scheduler's own view of the database: silence while nobody could write is no proof of death.

    Level-triggered: every pass reports again the exits of tasks that still hold resources on a lost
    node, until the status service has taken them in (a publish that failed, or a message lost, only
    delays them)."""
    period_ms = deps.settings.reconcile_seconds * 1000
    try:
        nodes = await deps.store.list_nodes()
    except PyMongoError:
        deps.db_watch = deps.db_watch.observed(ok=False, now_ms=now_ms(), period_ms=period_ms)
        raise
    now = now_ms()
    deps.db_watch = deps.db_watch.observed(ok=True, now_ms=now, period_ms=period_ms)
    timeout_ms = deps.settings.node_timeout_seconds * 1000
    verdict = judge_nodes([Heartbeat(node_id=n.id, heartbeat_ms=n.heartbeat_ms, lost=n.lost) for n in nodes],
                          now_ms=now, timeout_ms=timeout_ms, watch=deps.db_watch)
    _say_held_back(deps, verdict.held_back, verdict.silent)
    NODES_SILENT.set(len(verdict.silent))
    for node in nodes:
        NODE_LOST.labels(node.id).set(1 if node.lost or node.id in verdict.lost else 0)
    events: list[CloudEvent] = []
    for node in nodes:
        if not node.lost:
            if node.id not in verdict.lost or not await deps.store.mark_node_lost(node.id, now - timeout_ms):
                continue
            silent = (now - node.heartbeat_ms) / 1000
            log.error("node lost: its launcher stopped sending heartbeats while the database answered",
                      node=node.id, silent_seconds=round(silent))
        reason = f"node {node.id} was lost: no heartbeat from its launcher since {_clock(node.heartbeat_ms)}"
        for job in await deps.store.jobs_on_node(node.id):
            for task in job.tasks:
                if task.node_id == node.id and holds_resources(task):
                    events.append(TaskExited(subject=job.id, data=TaskExitedData(
                        job_id=job.id, attempt=job.attempt, role=task.role, index=task.index,
                        task_attempt=task.retries, node_id=node.id, exit_code=exitcodes.NODE_LOST, reason=reason)))
    return events


def _say_held_back(deps: SchedulerDeps, held_back: str | None, silent: tuple[str, ...]) -> None:
    """Log once when silent nodes start being spared, and once when that ends."""
    if held_back is not None and deps.held_back is None:
        log.warning("silent nodes are not declared lost", why=held_back, nodes=list(silent))
    elif held_back is None and deps.held_back is not None:
        log.info("silent nodes are judged again", silent_nodes=list(silent))
    deps.held_back = held_back


def _clock(ms: int) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(ms / 1000))


async def start_scheduler(stack: AsyncExitStack, deps: SchedulerDeps) -> None:
    """Stand by until this instance holds the lease, decide while it does, stand by again if it is lost."""
    deps.vitals.roles["scheduler"] = STANDBY
    deps.vitals.background(stack, LEAD_LOOP, lambda: _lead(deps))
    stack.push_async_callback(_release, deps)


async def _release(deps: SchedulerDeps) -> None:
    """On shutdown: let a standby take over at once instead of after the lease's time (if the database
    answers; otherwise the lease simply runs out)."""
    try:
        with pymongo.timeout(RELEASE_SECONDS):  # the driver's deadline: a cancelled call can wedge its client
            await deps.store.release_lease(LEASE, deps.instance)
    except PyMongoError as e:
        log.warning("could not release the scheduler lease; it runs out by itself", error=describe(e))


async def _lead(deps: SchedulerDeps) -> None:
    """Forever: stand by, lead until the lease is lost. A database error on the way raises; vitals runs
    this again after a backoff (standing by first, so leading resumes only with the lease)."""
    while True:
        held_since = await _stand_by(deps)
        try:
            await _leading(deps, held_since)
        finally:
            deps.fence = None
            deps.vitals.roles["scheduler"] = STANDBY
            _forget_gauges()


def _forget_gauges() -> None:
    """A scheduler standing by exports none of the leader's view: the cluster's gauges come from the leader
    alone (a standby's last values would otherwise stay, stale, beside the new leader's)."""
    for gauge in (NODE_GPUS, NODE_LOST, VC_GPUS, QUEUE_LENGTH, VC_BORROWED, VC_LENT, VC_QUOTA):
        gauge.clear()
    NODES_SILENT.set(0)


async def _stand_by(deps: SchedulerDeps) -> float:
    """Wait until this instance holds the lease; the monotonic time the successful call was sent (the lease
    it wrote runs from then: the call may have waited long for the database)."""
    ttl_ms = deps.settings.lease_seconds * 1000
    said = False
    while True:
        sent = time.monotonic()
        held = await deps.store.hold_lease(LEASE, deps.instance, ttl_ms)
        deps.vitals.ok(LEAD_LOOP)  # the database answered
        if held:
            return sent
        if not said:
            log.info("standing by: another scheduler holds the lease", instance=deps.instance)
            said = True
        await asyncio.sleep(deps.settings.lease_seconds / 3)


def scheduler_router(on_change: Handler[CloudEvent]) -> Router:
    """What wakes the scheduler for a pass: a job to place, a node's capacity, resources freed. Its queue is
    bound to these types alone (shared/schemas/EVENTS.md's consumers are checked against it)."""
    router = Router()
    for kind in (JobSubmitted, NodeRegistered, JobCompleted, JobRequeued):
        router.on(kind, on_change)
    return router


async def _leading(deps: SchedulerDeps, held_since: float) -> None:
    """Consume the scheduler's queue and run passes until the lease is lost (then stop all of it). The lease
    is kept first, so that whatever else hangs, a leader that cannot renew stands down in time; the role
    says leader only once everything that leads runs."""
    deps.fence = Fence(LEASE, deps.instance)
    deps.lost.clear()

    async def on_change(_: CloudEvent) -> Sequence[CloudEvent]:
        deps.wanted.set()  # a burst of N events costs one or two passes, not N
        return []

    async def periodic() -> None:
        await deps.bus.publish(await detect_lost_nodes(deps))
        deps.wanted.set()
        await _gauge_queues(deps)

    router = scheduler_router(on_change)
    async with AsyncExitStack() as stack:
        _keep_lease(deps, stack, held_since)
        # bounded (BusError): then stand by and try again
        await consume(stack, deps.bus, f"{deps.settings.queue_prefix}.scheduler", router.event_types, router)
        deps.vitals.background(stack, "scheduler-passes", lambda: _passes(deps))
        deps.vitals.periodic(stack, "scheduler-reconcile", deps.settings.reconcile_seconds, periodic)
        deps.wanted.set()  # jobs that waited while no scheduler ran
        deps.vitals.roles["scheduler"] = LEADER
        log.info("this scheduler leads now", instance=deps.instance)
        await deps.lost.wait()
        # Another instance may lead by now (this one was cut off for longer than the lease): deciding on would
        # make two. The role says so at once; the loops stop once their rounds in flight are over (a
        # commit among them is fenced by the lease: the database refuses it when another holds it).
        deps.vitals.roles["scheduler"] = STANDBY
        log.error("lost the scheduler lease; standing by so that only one scheduler decides", instance=deps.instance)


def _keep_lease(deps: SchedulerDeps, stack: AsyncExitStack, held_since: float) -> None:
    """Renew the lease every third of its time; ``deps.lost`` is set when a renewal finds it held by another,
    or when the lease may have run out: a renewal counts from when it was sent, not when it returned (one
    that waited out a database restart wrote an expiry already past, and a standby may hold the lease by
    now), so a leader whose last renewal was sent more than the lease's time ago stands down, whatever its
    renewal still waits for."""
    ttl_ms = deps.settings.lease_seconds * 1000
    renewed = held_since

    async def renew() -> None:
        nonlocal renewed
        sent = time.monotonic()
        if not await deps.store.hold_lease(LEASE, deps.instance, ttl_ms):
            deps.lost.set()
        renewed = max(renewed, sent)

    async def deadline() -> None:
        while not deps.lost.is_set():
            await asyncio.sleep(deps.settings.lease_seconds / 6)
            if time.monotonic() - renewed > deps.settings.lease_seconds:
                log.error("the scheduler lease may have run out (no renewal sent within its time succeeded); "
                          "standing down", instance=deps.instance, lease_seconds=deps.settings.lease_seconds)
                deps.lost.set()

    deps.vitals.periodic(stack, "scheduler-lease", deps.settings.lease_seconds / 3, renew)
    watch = asyncio.create_task(deadline(), name="scheduler-lease-deadline")
    stack.callback(watch.cancel)


async def _passes(deps: SchedulerDeps) -> None:
    """Run a pass whenever one is wanted: events that arrive during a pass ask for one more, however many.
    A pass that fails (the database or the broker away) is tried again with backoff."""
    failures = 0
    started = float("-inf")
    while True:
        await deps.wanted.wait()
        if (gap := started + PASS_GAP_SECONDS - time.monotonic()) > 0:
            await asyncio.sleep(gap)  # more events come meanwhile: one pass for them all
        deps.wanted.clear()
        started = time.monotonic()
        try:
            async with deps.vitals.round(PASSES_LOOP):
                events = await schedule_pass(deps)
            await deps.bus.publish(events)
        except LeaseLostError:
            deps.lost.set()  # _leading stops this loop
            continue
        except Exception as e:  # the database or the broker away (or a bug): said once, retried with backoff
            failures += 1
            deps.vitals.failed(PASSES_LOOP, e)
            await asyncio.sleep(backoff(failures))
            deps.wanted.set()
            continue
        failures = 0
        deps.vitals.ok(PASSES_LOOP)
