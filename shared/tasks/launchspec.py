"""From a placement plan to what each node's launcher is told: pure, so it is table-tested.

A launch carries the job's shared environment once (``job_env``: the job's variables, every role's
hosts and ports, jobEnvs) and each task's spec only the variables of its own; the launcher starts a
task with :func:`shared.tasks.envvars.task_environment` of the two. :func:`task_specs` gives specs with
the whole environment.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from shared.records import JobRecord, TaskRecord, TaskSpec
from shared.scheduling.placement import Plan
from shared.taskref import TaskRef
from shared.tasks.envvars import JobEnvironment, app_id, job_environment, resolve_paths, task_environment


def container_name(job_id: str, attempt: int, role: str, index: int, task_attempt: int = 0) -> str:
    """A Docker-safe name, the same every time for one run of one task of one attempt (so launches are
    idempotent): ASCII, at most 134 characters whatever the names' lengths (the task's ``PAI_CONTAINER_ID``).
    A task's re-run (``task_attempt`` > 0) has a name of its own; a first run's is what it always was."""
    again = f"-r{task_attempt}" if task_attempt else ""
    readable = re.sub(r"[^A-Za-z0-9_.-]", "-", f"{job_id}-{attempt}-{role}-{index}")[:120 - len(again)] + again
    parts = f"{job_id}\0{attempt}\0{role}\0{index}" + (f"\0{task_attempt}" if task_attempt else "")
    digest = hashlib.sha256(parts.encode()).hexdigest()[:8]
    return f"paiq-{readable}-{digest}"


def ref_container_name(key: TaskRef) -> str:
    """:func:`container_name` of one run of a task, named by its :class:`TaskRef`."""
    return container_name(key.job_id, key.attempt, key.role, key.index, key.task_attempt)


def placed_tasks(plan: Plan) -> tuple[TaskRecord, ...]:
    return tuple(
        TaskRecord(role=t.role, index=t.index, node_id=t.node_id, ip=t.ip, gpus=t.gpus, ports=t.ports)
        for t in plan.tasks
    )


@dataclass(frozen=True)
class JobLaunch:
    """One attempt of a placed job, its environment's shared part built once (O(tasks)); each
    :meth:`spec` then costs only the task's own variables."""

    job: JobRecord
    env: JobEnvironment
    auth_file: str
    code_dir: str

    @property
    def job_env(self) -> dict[str, str]:
        return self.env.shared

    def spec(self, role_name: str, index: int, task_attempt: int = 0) -> TaskSpec:
        """The task's spec (of its run ``task_attempt``); its ``env`` holds only its own variables (whole:
        ``task_environment(job_env, env)``)."""
        config = self.job.config
        role = config.role(role_name)
        placement = self.env.plan.for_task(role_name, index)
        name = container_name(self.job.id, self.job.attempt, role.name, index, task_attempt)
        return TaskSpec(
            job_id=self.job.id, attempt=self.job.attempt, task_attempt=task_attempt, user=self.job.user,
            virtual_cluster=self.job.virtual_cluster, role=role.name, index=index, image=config.image_of(role),
            # as mapped: a v2 job's <% $secrets %> are rendered by the launcher, never carried in an event
            command=role.command, env=self.env.own(role, index, name, task_attempt),
            cpus=role.cpu_number, memory_mb=role.memory_mb, shm_mb=role.shm_mb,
            gpus=placement.gpus, ports=placement.ports,
            # As the user wrote them (after substitution): the launcher resolves them under the storage root.
            auth_file=self.auth_file,
            code_dir=self.code_dir,
            is_debug=config.is_debug(),
        )

    def specs(self) -> list[TaskSpec]:
        """Every task's spec (own variables only), in plan order."""
        return [self.spec(t.role, t.index) for t in self.env.plan.tasks]


def job_launch(job: JobRecord, plan: Plan, default_fs_uri: str) -> JobLaunch:
    paths = resolve_paths(job.config, job.user, default_fs_uri)
    env = job_environment(job.config, plan, user=job.user, paths=paths, app=app_id(job.id, job.attempt),
                          attempt=job.attempt)
    return JobLaunch(job=job, env=env,
                     auth_file=paths.auth_file, code_dir=paths.code_dir)


def task_specs(job: JobRecord, plan: Plan, default_fs_uri: str) -> list[TaskSpec]:
    """Every task's spec with its whole environment (a launch with no ``job_env``): for tools and tests;
    the scheduler sends :meth:`JobLaunch.specs` with the shared part once."""
    launch = job_launch(job, plan, default_fs_uri)
    return [s.model_copy(update={"env": task_environment(launch.job_env, s.env)}) for s in launch.specs()]
