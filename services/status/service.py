"""Folds task events into MongoDB through the pure state machine of :mod:`shared.lifecycle.transitions`.

For each event: take the job as this service last wrote it (kept, :data:`KNOWN_JOBS` at most) or read it,
compute the transition (pure), write it over that version. A concurrent writer (the scheduler placing or
preempting it, another status process) makes the write miss, and the event is applied again to the job read
as it now is; a kept record that calls for no change is read again before the event is dropped. One lock per
job keeps this process's own handlers from racing each other.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path

import structlog

from shared.bus.base import Bus, Router, consume
from shared.db.journal import journaled, split
from shared.db.store import Store
from shared.events import CloudEvent, JobPreempted, JobStopRequested, TaskExited, TaskProgress, TaskStarted
from shared.lifecycle import transitions as lifecycle
from shared.lifecycle.completion import decide_completion
from shared.lifecycle.exitspec import load_table
from shared.lifecycle.transitions import Change, RetryPolicy
from shared.ops.metrics import JOBS
from shared.ops.vitals import Vitals
from shared.records import JobRecord, SubState, now_ms
from shared.settings.model import Settings

log = structlog.get_logger("paiq.status")

Transition = Callable[[JobRecord, int], Change | None]
MAX_WRITE_ATTEMPTS = 20
KNOWN_JOBS = 1000  # jobs kept as last written: a running job's next event needs no read of it


@dataclass
class StatusDeps:
    settings: Settings
    store: Store
    bus: Bus
    policy: RetryPolicy
    vitals: Vitals = field(default_factory=Vitals)
    locks: dict[str, asyncio.Lock] = field(default_factory=dict)
    known: OrderedDict[str, JobRecord] = field(default_factory=OrderedDict)  # as last written, oldest first
    wakeups: set[asyncio.Task[None]] = field(default_factory=set)


def retry_policy(settings: Settings) -> RetryPolicy:
    path = settings.exit_spec_path
    return RetryPolicy(table=load_table(Path(path) if path else None),
                       max_platform_retries=settings.max_platform_retries, backoff_base_ms=settings.retry_backoff_ms,
                       backoff_max_ms=max(settings.retry_backoff_ms, 300_000))


async def apply(deps: StatusDeps, job_id: str, transition: Transition,
                applied: CloudEvent | None = None) -> list[CloudEvent]:
    """Apply ``transition`` to the job and store it with the events it announces and ``applied`` (the event
    from the bus that caused it, a launcher's ``task.*``: already published), journaled in one transaction
    (:mod:`shared.db.journal`); the commands to publish now (none if nothing changed)."""
    lock = deps.locks.setdefault(job_id, asyncio.Lock())
    try:
        return await _apply_locked(deps, job_id, transition, lock, applied)
    finally:
        if not lock.locked() and deps.locks.get(job_id) is lock:
            del deps.locks[job_id]  # nobody waits for it: do not keep one lock per job ever seen


async def _apply_locked(deps: StatusDeps, job_id: str, transition: Transition, lock: asyncio.Lock,
                        applied: CloudEvent | None) -> list[CloudEvent]:
    async with lock:
        job = deps.known.pop(job_id, None)
        for _ in range(MAX_WRITE_ATTEMPTS):
            kept = job is not None
            if job is None and (job := await deps.store.get_job(job_id)) is None:
                return []
            change = transition(job, now_ms())
            if change is None:
                if kept:  # nothing to do by the record kept: said only by the job as it is now
                    job = None
                    continue
                _keep(deps, job)
                return []
            new, events = change
            announced, commands = split(events)
            cause = [applied] if applied is not None and journaled(applied) else []
            if await deps.store.replace_job(new, job.version, [*cause, *announced],
                                            [True] * len(cause) + [False] * len(announced)):
                _log_change(job, new)
                # As stored now: an ended job is counted by its write (or, without transactions, right after it)
                _keep(deps, new.model_copy(update={"version": job.version + 1, "archived": (),
                                                   "counted": new.counted or new.state.is_final}))
                await _after_write(deps, new)
                return commands
            job = None  # changed meanwhile: read it again
        raise RuntimeError(f"job {job_id} kept changing under the status service; the event will be retried")


def _keep(deps: StatusDeps, job: JobRecord) -> None:
    """Keep the job as it is stored now for its next event, unless it is done (ended, its tasks stopped)."""
    deps.known.pop(job.id, None)
    if job.state.is_final and job.sub_state == SubState.COMPLETED:
        return
    deps.known[job.id] = job  # the newest last
    if len(deps.known) > KNOWN_JOBS:
        deps.known.popitem(last=False)


def then(first: Transition, second: Transition) -> Transition:
    """``second`` applied to what ``first`` made of the job: one write of both changes, their events in order."""
    def both(job: JobRecord, now: int) -> Change | None:
        one = first(job, now)
        two = second(one[0] if one is not None else job, now)
        if one is None or two is None:
            return one if two is None else two
        return two[0], [*one[1], *two[1]]
    return both


def _log_change(old: JobRecord, new: JobRecord) -> None:
    if (old.state, old.sub_state) == (new.state, new.sub_state):
        return
    log.info("job changed", job_id=new.id, state=new.state.value, sub_state=new.sub_state,
             was=f"{old.state.value}/{old.sub_state}", reason=new.reason or new.exit_reason or None)


async def _after_write(deps: StatusDeps, job: JobRecord) -> None:
    if job.state.is_final and job.delete_requested and job.sub_state == SubState.COMPLETED:
        # Only once its containers are gone: until then the record is what holds their resources.
        await deps.store.delete_job(job.id)
        log.info("job deleted as its owner asked", job_id=job.id)
    elif job.sub_state == SubState.RETRY_PENDING and job.retry_at_ms:
        _wake_at(deps, job.id, job.retry_at_ms)


def _wake_at(deps: StatusDeps, job_id: str, at_ms: int) -> None:
    """Check the retry when it is due (the periodic pass catches it too if this process restarts)."""
    task = asyncio.create_task(_requeue(deps, job_id, max(0.0, (at_ms - now_ms()) / 1000) + 0.05))
    deps.wakeups.add(task)
    task.add_done_callback(deps.wakeups.discard)


async def _requeue(deps: StatusDeps, job_id: str, delay_s: float) -> None:
    await asyncio.sleep(delay_s)
    try:
        await deps.bus.publish(await apply(deps, job_id, lifecycle.retry_due))
    except Exception:
        log.exception("could not requeue a job for its retry; the next pass will", job_id=job_id)


async def on_task_started(evt: TaskStarted, deps: StatusDeps) -> list[CloudEvent]:
    return await apply(deps, evt.data.job_id, lambda job, now: lifecycle.task_started(job, evt.data, now), evt)


async def on_task_progress(evt: TaskProgress, deps: StatusDeps) -> list[CloudEvent]:
    return await apply(deps, evt.data.job_id, lambda job, now: lifecycle.task_progress(job, evt.data, now), evt)


async def on_task_exited(evt: TaskExited, deps: StatusDeps) -> list[CloudEvent]:
    # The last task of a failed attempt may just have ended: its retry may be due already.
    return await apply(deps, evt.data.job_id,
                       then(lambda job, now: lifecycle.task_exited(job, evt.data, now, deps.policy),
                            lifecycle.retry_due), evt)


async def on_stop_requested(evt: JobStopRequested, deps: StatusDeps) -> list[CloudEvent]:
    return await apply(deps, evt.data.job_id, lambda job, now: lifecycle.stop_requested(job, evt.data.by, now))


async def on_preempted(evt: JobPreempted, deps: StatusDeps) -> list[CloudEvent]:
    """Carry out the scheduler's preemption as recorded on the job (the event only says there is one)."""
    return await apply(deps, evt.data.job_id, lambda job, now: lifecycle.preempted(job, now, deps.policy))


async def reconcile(deps: StatusDeps) -> list[CloudEvent]:
    """Level-triggered pass: stops and preemptions whose event was lost, completions, retries that are due."""
    events: list[CloudEvent] = []
    for job in await deps.store.jobs_to_stop():
        events += await apply(deps, job.id, _stop_as_recorded)
    for job in await deps.store.jobs_to_preempt():
        events += await apply(deps, job.id, lambda j, now: lifecycle.preempted(j, now, deps.policy))
    # Each job is judged on the record just listed, and read again (and judged again, under its lock) only
    # when there is something to do: a pass over N running jobs with nothing to do reads them once, not 2N
    # times (issue 37: the reconcile every 10 s was a large share of an idle platform's reads).
    now = now_ms()
    for job in await deps.store.placed_jobs():
        if _complete_if_decided(job, now, deps.policy) is not None:
            events += await apply(deps, job.id, lambda j, at: _complete_if_decided(j, at, deps.policy))
    for job in await deps.store.retry_pending_jobs():
        if lifecycle.retry_due(job, now) is not None:
            events += await apply(deps, job.id, lifecycle.retry_due)
    for job in await deps.store.uncounted_finished_jobs():
        await deps.store.count_finished(job)  # its count was cut short (a crash between two writes)
    await _count_jobs(deps)
    return events


RETENTION_BATCH = 100
RETENTION_BATCHES_PER_PASS = 20
EXPIRY_SECONDS = 60  # how often expired sessions and idempotency records are removed (shared.db.expiry)


async def remove_expired(deps: StatusDeps) -> int:
    """Retention: delete jobs that ended more than PAIQ_JOB_RETENTION_DAYS ago, with their attempts,
    logs and runs, a small batch at a time so that the API never waits behind it; how many went."""
    days = deps.settings.job_retention_days
    if days <= 0:
        return 0
    before = now_ms() - int(days * 86_400_000)
    removed = 0
    for _ in range(RETENTION_BATCHES_PER_PASS):
        batch = await deps.store.expired_jobs(before, RETENTION_BATCH)
        for job_id in batch:
            removed += await deps.store.delete_job(job_id)
        if len(batch) < RETENTION_BATCH:
            break
        await asyncio.sleep(0.2)  # let other requests in between batches
    if removed:
        log.info("removed jobs past their retention", jobs=removed, retention_days=days)
    return removed


async def _count_jobs(deps: StatusDeps) -> None:
    counts = await deps.store.job_counts_by_vc_and_state()
    JOBS.clear()
    for vc, states in counts.items():
        for state, n in states.items():
            JOBS.labels(state, vc).set(n)


def _stop_as_recorded(job: JobRecord, now: int) -> Change | None:
    return lifecycle.stop_requested(job, job.stop_requested_by or "unknown", now)


def _complete_if_decided(job: JobRecord, now: int, policy: RetryPolicy) -> Change | None:
    if job.state.is_final or job.sub_state == SubState.RETRY_PENDING:
        return None
    outcome = decide_completion(job)
    return None if outcome is None else lifecycle.conclude(job, outcome, now, policy)


def status_router(deps: StatusDeps) -> Router:
    """The events the status service folds into jobs; its queue is bound to these types alone
    (shared/schemas/EVENTS.md's consumers are checked against it)."""
    router = Router()
    router.on(TaskStarted, lambda evt: on_task_started(evt, deps))
    router.on(TaskProgress, lambda evt: on_task_progress(evt, deps))
    router.on(TaskExited, lambda evt: on_task_exited(evt, deps))
    router.on(JobStopRequested, lambda evt: on_stop_requested(evt, deps))
    router.on(JobPreempted, lambda evt: on_preempted(evt, deps))
    return router


async def start_status(stack: AsyncExitStack, deps: StatusDeps) -> None:
    router = status_router(deps)
    await consume(stack, deps.bus, f"{deps.settings.queue_prefix}.status", router.event_types, router)

    async def periodic() -> None:
        await deps.bus.publish(await reconcile(deps))

    def cancel_wakeups() -> None:
        for task in deps.wakeups:
            task.cancel()

    async def retention() -> None:
        await remove_expired(deps)

    async def expired_records() -> None:
        removed = await deps.store.expiring.purge()
        if removed:
            log.info("removed expired sessions and idempotency records", removed=removed)

    stack.callback(cancel_wakeups)
    await periodic()
    deps.vitals.periodic(stack, "status-expiry", EXPIRY_SECONDS, expired_records)
    deps.vitals.periodic(stack, "status-reconcile", deps.settings.reconcile_seconds, periodic)
    if deps.settings.job_retention_days > 0:
        deps.vitals.periodic(stack, "status-retention", max(60, deps.settings.reconcile_seconds), retention)
    log.info("status started", exit_codes=len(deps.policy.table.entries))
