"""The level-triggered pass, on start and on a timer: Docker and MongoDB made to agree.

What to do about each task is :func:`services.launcher.decide.decide`'s; this module looks and carries
it out. For every container of this node (by its node label):
- ended: its exit is reported and its log saved, then it is removed (exits missed while down);
- running, of a job that is gone, final, or on another attempt: stopped (SIGTERM, then SIGKILL);
- running, of an active job: adopted: its output recorded again from where the store left off, and
  ``task.started`` sent again if the job still shows the task waiting and this process has not sent it
  (the status service may just not have taken in the one sent). No user task is restarted.
For every task placed on this node and still waiting, with no container: launched, unless its run
shows it already ran (then its exit is reported again if the job has not taken it in yet).
Work that can take long (pulls, stops, log catch-up) runs in the background; the pass itself is quick.
"""

from __future__ import annotations

from collections.abc import Mapping

import structlog

from services.launcher.announce import exited_event, publish_with_starts, started_event, watch
from services.launcher.decide import Action, Prompt, Seen, container_state, decide, run_seen
from services.launcher.deps import LauncherDeps
from services.launcher.engine.driver import ContainerInfo
from services.launcher.engine.tasklabels import TaskLabels
from services.launcher.finish import finish
from services.launcher.launch import launch_and_report
from services.launcher.stopping import stop_container
from shared.db.logs import TaskRun
from shared.records import JobRecord, TaskRecord, now_ms
from shared.scheduling.placement import Plan, TaskPlacement
from shared.taskref import TaskRef
from shared.tasks.launchspec import JobLaunch, job_launch, ref_container_name

log = structlog.get_logger("paiq.launcher")


def plan_of(job: JobRecord) -> Plan | None:
    """The job's placement as the scheduler decided it, read back from its tasks (None: not placed)."""
    if any(t.node_id is None or t.ip is None for t in job.tasks):
        return None
    return Plan(tasks=tuple(TaskPlacement(role=t.role, index=t.index, node_id=str(t.node_id), ip=str(t.ip),
                                          gpus=t.gpus, ports=t.ports) for t in job.tasks))


async def reconcile(deps: LauncherDeps) -> None:
    containers = await deps.driver.list_managed(deps.node.node_id)
    # The jobs that hold resources here, in one query; then, in one more, those of containers that are not
    # among them (ended or deleted jobs, jobs moved on): a pass over N running tasks reads the database twice
    # at most, not once per task.
    on_node = await deps.store.jobs_on_node(deps.node.node_id)
    jobs: dict[str, JobRecord | None] = {job.id: job for job in on_node}
    tasks = [(c, task) for c in containers if (task := TaskLabels.from_labels(c.labels)) is not None]
    if missing := sorted({task.job for _, task in tasks} - jobs.keys()):
        found = await deps.store.get_jobs(missing)
        jobs.update({job_id: found.get(job_id) for job_id in missing})
    for c, task in tasks:
        await _settle(deps, c, task, jobs[task.job])
    names = {c.name for c in containers if c.status != "created"}
    # The tasks placed here without a container, and their runs (what the launcher last recorded) in one query.
    absent = {job.id: here for job in on_node if (here := _absent(deps, job, names))}
    runs = await deps.logs.get_runs([key for here in absent.values() for _, key in here]) if absent else {}
    for job in on_node:
        if job.id in absent:
            await _launch_missing(deps, job, absent[job.id], runs)


async def _settle(deps: LauncherDeps, c: ContainerInfo, task: TaskLabels, job: JobRecord | None) -> None:
    key = task.ref
    if ref_container_name(key) in deps.work.launches:
        # Its launch is still in flight: the engine runs the container before the launch resumes to record and
        # say its start. A pass in between adopted it and said the start too, and the launch said it again.
        return
    decision = decide(Seen(prompt=Prompt.PASS, task=key, job=job, container=container_state(c),
                           user_stop=deps.work.was_stopped_by_user(c.id),
                           announced=deps.work.was_started_announced(c.id)))
    log_ids = {"job_id": key.job_id, "role": key.role, "index": key.index, "container": c.id[:12]}
    match decision.action:
        case Action.FINISH:
            if c.id not in deps.work.finishes:
                deps.work.spawn(f"finish-{c.id[:12]}", finish(deps, c))
        case Action.STOP:
            if not deps.work.is_stopping(c.id):
                log.info("stopping a container whose job is over or gone", **log_ids)
                deps.work.spawn(f"stop-{c.id[:12]}", stop_container(deps, c.id, by_user=decision.by_user))
        case Action.ADOPT:
            if not deps.work.has_recorder(c.id):
                log.info("adopted a running task container", **log_ids)
                watch(deps, key, c.id, is_debug=task.debug)
                await deps.logs.set_running(key, c.id)
            if decision.announce:
                deps.work.started_announced(c.id)
                await publish_with_starts(deps, [started_event(key, deps.node.node_id, c.id)])
        case _:
            pass  # never started: a launch (message or the pass below) starts it


def _absent(deps: LauncherDeps, job: JobRecord, containers: set[str]) -> list[tuple[TaskRecord, TaskRef]]:
    """The job's tasks placed on this node, not ended, with no container and no launch in flight."""
    out: list[tuple[TaskRecord, TaskRef]] = []
    for task in job.tasks:
        if task.node_id != deps.node.node_id or task.state.is_final:
            continue
        # The task's current run (its re-runs in place have names and runs of their own: taskRetryCount).
        key = TaskRef(job_id=job.id, attempt=job.attempt, role=task.role, index=task.index, task_attempt=task.retries)
        name = ref_container_name(key)
        if name not in containers and name not in deps.work.launches:
            out.append((task, key))
    return out


async def _launch_missing(deps: LauncherDeps, job: JobRecord, absent: list[tuple[TaskRecord, TaskRef]],
                          runs: Mapping[str, TaskRun]) -> None:
    launch: JobLaunch | None = None  # the job's shared environment, built once for all its tasks here
    for task, key in absent:
        name = ref_container_name(key)
        if name in deps.work.launches:  # a launch message came while the runs were read
            continue
        run = runs.get(key.id)
        decision = decide(Seen(prompt=Prompt.PASS, task=key, job=job, run=run_seen(run), now_ms=now_ms(),
                               stale_after_ms=deps.settings.reconcile_seconds * 1000))
        if decision.action is Action.RESEND_EXIT and run is not None and run.exit_code is not None:
            await deps.publish([exited_event(run, deps.node.node_id, run.exit_code, run.reason,
                                             run.diagnostics, run.container_id)])
        elif decision.action is Action.RELAUNCH:
            launch = launch or launch_of(job, deps.settings.default_fs_uri)
            if launch is None:
                return
            log.info("launching a placed task that has no container", job_id=job.id, role=task.role,
                     index=task.index)
            deps.work.spawn(f"relaunch-{name}", launch_and_report(
                deps, launch.spec(task.role, task.index, task.retries), launch.job_env))


def launch_of(job: JobRecord, default_fs_uri: str) -> JobLaunch | None:
    """The job's launch rebuilt from the job as stored (what the scheduler sent, derived the same way):
    the shared environment in O(tasks of the job), then each task's spec from it."""
    plan = plan_of(job)
    return None if plan is None else job_launch(job, plan, default_fs_uri)

