"""The level-triggered pass, on start and on a timer: Docker and MongoDB made to agree.

For every container of this node (by its ``paiq.node`` label):
- ended: its exit is reported and its log saved, then it is removed (exits missed while down);
- running, of a job that is gone, final, or on another attempt: stopped (SIGTERM, then SIGKILL);
- running, of an active job: adopted: its output recorded again from where the store left off, and
  ``task.started`` sent again if the job still shows the task waiting. No user task is restarted.
For every task placed on this node and still waiting, with no container: launched, unless its run
shows it already ran (then its exit is reported again if the job has not taken it in yet).
Work that can take long (pulls, stops, log catch-up) runs in the background; the pass itself is quick.
"""

from __future__ import annotations

from collections.abc import Mapping

import structlog

from services.launcher.deps import LauncherDeps
from services.launcher.driver import ContainerInfo
from services.launcher.finish import exited_event, finish, run_key, started_event, watch
from services.launcher.launch import launch_task
from services.launcher.stopping import stop_container
from shared.launchspec import JobLaunch, container_name, job_launch
from shared.logstore import RunKey, RunPhase
from shared.placement import Plan, TaskPlacement
from shared.records import JobRecord, TaskSpec, TaskState, now_ms

log = structlog.get_logger("paiq.launcher")


def plan_of(job: JobRecord) -> Plan | None:
    """The job's placement as the scheduler decided it, read back from its tasks (None: not placed)."""
    if any(t.node_id is None or t.ip is None for t in job.tasks):
        return None
    return Plan(tasks=tuple(TaskPlacement(role=t.role, index=t.index, node_id=str(t.node_id), ip=str(t.ip),
                                          gpus=t.gpus, ports=t.ports) for t in job.tasks))


async def reconcile(deps: LauncherDeps) -> None:
    containers = await deps.driver.list_managed(deps.node.node_id)
    jobs: dict[str, JobRecord | None] = {}
    for c in containers:
        job_id = c.labels.get("paiq.job", "")
        if job_id not in jobs:
            jobs[job_id] = await deps.store.get_job(job_id)
        await _settle(deps, c, jobs[job_id])
    names = {c.name for c in containers if c.status != "created"}
    # Final jobs too: a leftover task whose exit report was lost would hold its resources forever.
    for job in await deps.store.jobs_on_node(deps.node.node_id):
        await _launch_missing(deps, job, names)


async def _settle(deps: LauncherDeps, c: ContainerInfo, job: JobRecord | None) -> None:
    key = run_key(c.labels)
    if key is None or c.status == "created":
        return  # never started: a launch (message or the pass below) starts it
    if not c.running:
        if c.id not in deps.finishing:
            deps.spawn(f"finish-{c.id[:12]}", finish(deps, c))
        return
    if job is None or job.state.is_final or job.attempt != key.attempt:
        if c.id not in deps.stopping:
            log.info("stopping a container whose job is over or gone", job_id=key.job_id, role=key.role,
                     index=key.index, container=c.id[:12])
            deps.spawn(f"stop-{c.id[:12]}", stop_container(
                deps, c.id, by_user=bool(job and job.stop_requested_by and job.attempt == key.attempt)))
        return
    if c.id not in deps.recorders:
        log.info("adopted a running task container", job_id=key.job_id, role=key.role, index=key.index,
                 container=c.id[:12])
        watch(deps, key, c.id, is_debug=c.labels.get("paiq.debug") == "1")
        await deps.logs.set_running(key, c.id)
    task = job.tasks[job.task_slot(key.role, key.index)]
    if task.state is TaskState.WAITING:
        await deps.publish([started_event(key, deps.node.node_id, c.id)])


async def _launch_missing(deps: LauncherDeps, job: JobRecord, containers: set[str]) -> None:
    mine = [t for t in job.tasks if t.node_id == deps.node.node_id and not t.state.is_final]
    if not mine:
        return
    launch: JobLaunch | None = None  # the job's shared environment, built once for all its tasks here
    for task in mine:
        name = container_name(job.id, job.attempt, task.role, task.index)
        if name in containers or name in deps.launching:
            continue
        run = await deps.logs.get_run(RunKey(job_id=job.id, attempt=job.attempt, role=task.role, index=task.index))
        if run is not None and run.phase is RunPhase.ENDED:
            stale = now_ms() - (run.ended_ms or 0) > deps.settings.reconcile_seconds * 1000
            if stale and run.exit_code is not None:
                # The exit was reported but the job has not taken it in (a lost message): again.
                await deps.publish([exited_event(run.key, deps.node.node_id, run.exit_code, run.reason,
                                                 run.diagnostics, run.container_id)])
            continue
        # Never launched, or a launch cut short: launch. Started once but its container is gone: the
        # launch reports that. A task the job shows running with no run at all is left alone; nothing
        # is launched for a job that is over.
        if job.state.is_final:
            continue
        if task.state is TaskState.WAITING or (run is not None and run.phase is RunPhase.RUNNING):
            launch = launch or _launch_of(job, deps.settings.default_fs_uri)
            if launch is None:
                return
            log.info("launching a placed task that has no container", job_id=job.id, role=task.role,
                     index=task.index)
            deps.spawn(f"relaunch-{name}", _launch_and_publish(deps, launch.spec(task.role, task.index),
                                                               launch.job_env))


def _launch_of(job: JobRecord, default_fs_uri: str) -> JobLaunch | None:
    """The job's launch rebuilt from the job as stored (what the scheduler sent, derived the same way):
    the shared environment in O(tasks of the job), then each task's spec from it."""
    plan = plan_of(job)
    return None if plan is None else job_launch(job, plan, default_fs_uri)


async def _launch_and_publish(deps: LauncherDeps, spec: TaskSpec, job_env: Mapping[str, str]) -> None:
    await deps.publish(await launch_task(deps, spec, job_env))
