"""A task's container ended: save its log, say why it ended, report it, then remove the container.

The order matters for crash safety: the exit is recorded in the task's run and published before the
container is removed, so a launcher killed anywhere in between finds the container (or the run)
again on its next reconcile pass and reports the exit again; status ignores the duplicate.
"""

from __future__ import annotations

import asyncio
import contextlib

import structlog

from services.launcher.announce import exited_event, started_event
from services.launcher.container.gitclone import remove_clones
from services.launcher.decide import Action, ContainerState, Prompt, Seen, decide
from services.launcher.deps import LauncherDeps
from services.launcher.engine.driver import ContainerExit, ContainerInfo
from services.launcher.engine.tasklabels import TaskLabels
from services.launcher.exits import classify_exit, memory_before_oom
from services.launcher.recorder import LogRecorder
from shared.events import (
    CloudEvent,
)
from shared.lifecycle import exitcodes
from shared.records import JobRecord, TaskState
from shared.taskref import TaskRef
from shared.tasks.launchspec import ref_container_name

log = structlog.get_logger("paiq.launcher")

DIAGNOSTIC_LINES = 20
OOM_CURVE_POINTS = 12  # the samples an OOM kill's diagnostics show
RECORDER_DRAIN_SECONDS = 15


async def finish(deps: LauncherDeps, ended: ContainerExit | ContainerInfo) -> None:
    """Report an ended container once, however many times its end is noticed (event, reconcile)."""
    await asyncio.shield(deps.work.finishes.join(ended.id, f"finish-{ended.id[:12]}", lambda: _finish(deps, ended)))


async def _finish(deps: LauncherDeps, ended: ContainerExit | ContainerInfo) -> None:
    task = TaskLabels.from_labels(ended.labels)
    if task is None:
        return
    key = task.ref
    job = await deps.store.get_job(key.job_id)
    decision = decide(Seen(prompt=Prompt.EXIT, task=key, job=job, container=ContainerState.ENDED,
                           user_stop=deps.work.was_stopped_by_user(ended.id)))
    if decision.action is Action.FORGET:
        await _forget(deps, key, ended)
    else:
        await _report(deps, key, task, ended, by_user=decision.by_user,
                      unstarted=job is not None and _shown_waiting(job, key) and
                      not deps.work.was_started_announced(ended.id))


def _shown_waiting(job: JobRecord, key: TaskRef) -> bool:
    """Whether the job still shows the run of ``key`` as not started (its start never taken in)."""
    return any(t.role == key.role and t.index == key.index and t.retries == key.task_attempt
               and t.state is TaskState.WAITING for t in job.tasks)


async def _forget(deps: LauncherDeps, key: TaskRef, ended: ContainerExit | ContainerInfo) -> None:
    """A container of a deleted job: removed without a report, its run forgotten."""
    log.info("a container of a deleted job ended; removed without a report", job_id=key.job_id,
             container=ended.id[:12])
    recorder = deps.work.take_recorder(ended.id)
    if recorder is not None:
        recorder.cancel()
        await asyncio.gather(recorder, return_exceptions=True)
    await deps.logs.forget_run(key)
    await deps.profiles.forget(key)
    await deps.driver.remove(ended.id)
    await remove_clones(deps.settings, ref_container_name(key))


async def _save_log(deps: LauncherDeps, key: TaskRef, container_id: str) -> None:
    recorder = deps.work.take_recorder(container_id)
    end = None
    if recorder is not None:
        with contextlib.suppress(Exception):
            end = await asyncio.wait_for(recorder, RECORDER_DRAIN_SECONDS)
    # Catch up on what no recorder stored (the launcher was down, or the recorder failed): from where the
    # recorder ended if it ended cleanly (nothing read back from the store), else from what the store holds.
    await LogRecorder(deps.logs, deps.driver, key, container_id, max_bytes=deps.options.task_log_max_bytes,
                      resume=end).run()
    await deps.logs.set_log_state(key, complete=True)


async def _report(deps: LauncherDeps, key: TaskRef, task: TaskLabels, ended: ContainerExit | ContainerInfo, *,
                  by_user: bool, unstarted: bool = False) -> None:
    """Save the log, record and publish the exit, then remove the container (in that order: see above).
    ``unstarted``: the job never took in this container's start, and this process did not say it (a start
    lost with a ``paiq up`` killed before its in-process bus delivered it, the container ending while it was
    down): the start is said first, so that every run that ran has its start and its end."""
    launching = deps.work.launches.get(ref_container_name(key))
    if launching is not None:
        await asyncio.wait({launching})  # it registers the recorder this container's log needs
    try:
        await _save_log(deps, key, ended.id)
    except Exception as e:  # the exit matters more than the last lines of its log
        log.warning("could not save the end of a task's log; reporting its exit anyway", job_id=key.job_id,
                    role=key.role, index=key.index, error=repr(e))
    stderr = await deps.driver.logs_tail(ended.id, DIAGNOSTIC_LINES, stderr_only=True)
    run = await deps.logs.get_run(key)
    verdict = classify_exit(
        exit_code=ended.exit_code if ended.exit_code is not None else -1, oom_killed=ended.oom_killed,
        memory_mb=task.memory_mb, stopped_by_user=by_user, stderr_tail=stderr,
        stopped_for=run.stopped_for if run is not None else "")
    diagnostics = stderr[-4000:]
    if verdict.code == exitcodes.OUT_OF_MEMORY:
        curve = memory_before_oom(await deps.profiles.recent(key, OOM_CURVE_POINTS), task.memory_mb)
        diagnostics = f"{curve}\n{diagnostics}" if curve else diagnostics
    await deps.logs.set_ended(key, exit_code=verdict.code, reason=verdict.reason, diagnostics=diagnostics,
                              container_id=ended.id)
    said: list[CloudEvent] = [started_event(key, deps.node.node_id, ended.id)] if unstarted else []
    await deps.publish([*said, exited_event(key, deps.node.node_id, verdict.code, verdict.reason, diagnostics,
                                            ended.id)])
    log.info("task exited", job_id=key.job_id, role=key.role, index=key.index, exit_code=verdict.code,
             reason=verdict.reason or "succeeded", container=ended.id[:12])
    await deps.driver.remove(ended.id)
    await remove_clones(deps.settings, ref_container_name(key))
    deps.work.ended(ended.id)
