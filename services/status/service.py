"""Folds task events into MongoDB and completes jobs by OpenPAI's completion policy.

Every write is conditional (on the attempt and the state it expects), so a duplicated or late event
changes nothing; the decision itself is :func:`shared.completion.decide_completion`, a pure function.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass

import structlog

from shared import exitcodes
from shared.bus.base import Bus, Router
from shared.completion import Completion, decide_completion
from shared.events import (
    CloudEvent,
    JobCompleted,
    JobCompletedData,
    JobStopRequested,
    TaskExited,
    TaskProgress,
    TaskStarted,
)
from shared.records import ACTIVE_JOB_STATES, JobRecord, JobState, TaskState, now_ms
from shared.runtime import start_periodic
from shared.settings import Settings
from shared.store import Store

log = structlog.get_logger("paiq.status")

_NOT_FINAL = [TaskState.WAITING.value, TaskState.RUNNING.value]


@dataclass(frozen=True)
class StatusDeps:
    settings: Settings
    store: Store
    bus: Bus


async def on_task_started(evt: TaskStarted, deps: StatusDeps) -> list[CloudEvent]:
    d = evt.data
    job = await deps.store.get_job(d.job_id)
    if job is None or job.attempt != d.attempt:
        return []
    slot = job.task_slot(d.role, d.index)
    ts = now_ms()
    await deps.store.update_task(d.job_id, d.attempt, slot, [TaskState.WAITING.value], {
        "state": TaskState.RUNNING.value, "container_id": d.container_id, "started_ms": ts, "sub_state": ""})
    updated = await deps.store.update_job(
        d.job_id, {"state": JobState.WAITING.value, "attempt": d.attempt},
        {"state": JobState.RUNNING.value, "sub_state": "running", "launched_ms": ts})
    if updated is not None:
        log.info("job running", job_id=d.job_id)
    return []


async def on_task_progress(evt: TaskProgress, deps: StatusDeps) -> list[CloudEvent]:
    """A task not yet ended says what it is doing: pulling its image (while waiting; the job, still
    launching, says so too) or kept for debugging (while running, until ``kept_until_ms``)."""
    d = evt.data
    job = await deps.store.get_job(d.job_id)
    if job is None or job.attempt != d.attempt:
        return []
    expect = TaskState.WAITING if d.kept_until_ms is None else TaskState.RUNNING
    await deps.store.update_task(d.job_id, d.attempt, job.task_slot(d.role, d.index), [expect.value], {
        "sub_state": d.sub_state, "kept_until_ms": d.kept_until_ms, "reason": d.detail})
    if expect is TaskState.WAITING:
        await deps.store.update_job(d.job_id, {"state": JobState.WAITING.value, "attempt": d.attempt,
                                               "sub_state": {"$in": ["launching", d.sub_state]}},
                                    {"sub_state": d.sub_state})
    return []


def _task_state_for(exit_code: int, job: JobRecord) -> TaskState:
    if job.state.is_final:
        return TaskState.SUCCEEDED if exit_code == 0 else TaskState.STOPPED
    return TaskState.SUCCEEDED if exit_code == 0 else TaskState.FAILED


async def on_task_exited(evt: TaskExited, deps: StatusDeps) -> list[CloudEvent]:
    d = evt.data
    job = await deps.store.get_job(d.job_id)
    if job is None or job.attempt != d.attempt:
        return []
    try:
        slot = job.task_slot(d.role, d.index)
    except KeyError:
        log.warning("exit of a task the job does not have", role=d.role, index=d.index)
        return []
    after = await deps.store.update_task(d.job_id, d.attempt, slot, _NOT_FINAL, {
        "state": _task_state_for(d.exit_code, job).value, "exit_code": d.exit_code, "reason": d.reason,
        "diagnostics": d.diagnostics, "completed_ms": now_ms(),
        **({"container_id": d.container_id} if d.container_id else {})})
    if after is None:
        return []  # already recorded: a duplicate
    return await complete_if_done(deps, after)


async def complete_if_done(deps: StatusDeps, job: JobRecord) -> list[CloudEvent]:
    if job.state.is_final:
        return []
    outcome = decide_completion(job)
    return [] if outcome is None else await complete(deps, job, outcome)


async def complete(deps: StatusDeps, job: JobRecord, outcome: Completion) -> list[CloudEvent]:
    """Make ``outcome`` the job's end (once), close tasks that never started, announce it."""
    done = await deps.store.update_job(
        job.id, {"state": {"$in": list(ACTIVE_JOB_STATES)}, "attempt": job.attempt},
        {"state": outcome.state.value, "sub_state": "completed", "completed_ms": now_ms(),
         "exit_code": outcome.exit_code, "exit_reason": outcome.reason,
         "exit_diagnostics": outcome.diagnostics, "trigger_role": outcome.trigger_role,
         "trigger_index": outcome.trigger_index})
    if done is None:
        return []
    for slot, task in enumerate(done.tasks):
        if task.state == TaskState.WAITING:
            # Never started and never will: it must not hold its node's resources.
            await deps.store.update_task(job.id, job.attempt, slot, [TaskState.WAITING.value], {
                "state": TaskState.STOPPED.value, "reason": "the job ended before this task started",
                "completed_ms": now_ms()})
    log.info("job completed", job_id=job.id, state=outcome.state.value, exit_code=outcome.exit_code,
             reason=outcome.reason)
    if done.delete_requested:
        await deps.store.delete_job(job.id)
        log.info("job deleted as its owner asked", job_id=job.id)
    return [JobCompleted(subject=job.id, data=JobCompletedData(
        job_id=job.id, attempt=job.attempt, state=outcome.state, exit_code=outcome.exit_code,
        reason=outcome.reason, trigger_role=outcome.trigger_role, trigger_index=outcome.trigger_index))]


async def on_stop_requested(evt: JobStopRequested, deps: StatusDeps) -> list[CloudEvent]:
    """A stop ends the job at once as STOPPED; the launchers then stop what still runs."""
    job = await deps.store.get_job(evt.data.job_id)
    if job is None or job.state.is_final:
        return []
    return await complete(deps, job, Completion(
        state=JobState.STOPPED, exit_code=exitcodes.STOPPED_BY_USER, reason=f"stopped by {evt.data.by}"))


async def reconcile(deps: StatusDeps) -> list[CloudEvent]:
    """Complete any placed job whose tasks already decide it (an event may have been lost)."""
    events: list[CloudEvent] = []
    for job in await deps.store.jobs_to_stop():
        events.extend(await complete(deps, job, Completion(
            state=JobState.STOPPED, exit_code=exitcodes.STOPPED_BY_USER,
            reason=f"stopped by {job.stop_requested_by}")))
    for job in await deps.store.placed_jobs():
        events.extend(await complete_if_done(deps, job))
    return events


async def start_status(stack: AsyncExitStack, deps: StatusDeps) -> None:
    async def started(evt: TaskStarted) -> Sequence[CloudEvent]:
        return await on_task_started(evt, deps)

    async def exited(evt: TaskExited) -> Sequence[CloudEvent]:
        return await on_task_exited(evt, deps)

    async def stop(evt: JobStopRequested) -> Sequence[CloudEvent]:
        return await on_stop_requested(evt, deps)

    router = Router()
    router.on(TaskStarted, started)
    router.on(TaskExited, exited)
    router.on(JobStopRequested, stop)

    async def progress(evt: TaskProgress) -> Sequence[CloudEvent]:
        return await on_task_progress(evt, deps)

    router.on(TaskProgress, progress)
    await deps.bus.subscribe(f"{deps.settings.queue_prefix}.status",
                             ["task.started", "task.exited", "job.stop_requested", "task.progress"], router)

    async def periodic() -> None:
        await deps.bus.publish(await reconcile(deps))

    await periodic()
    start_periodic(stack, "status-reconcile", deps.settings.reconcile_seconds, periodic)
    log.info("status started")
