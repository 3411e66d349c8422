"""From a placement plan to what each node's launcher is told: pure, so it is table-tested."""

from __future__ import annotations

import hashlib
import re

from shared.envvars import build_task_env, resolve_paths
from shared.placement import Plan
from shared.records import JobRecord, TaskRecord, TaskSpec


def container_name(job_id: str, attempt: int, role: str, index: int) -> str:
    """A Docker-safe name, the same every time for one task of one attempt (so launches are idempotent)."""
    readable = re.sub(r"[^A-Za-z0-9_.-]", "-", f"{job_id}-{attempt}-{role}-{index}")[:120]
    digest = hashlib.sha256(f"{job_id}\0{attempt}\0{role}\0{index}".encode()).hexdigest()[:8]
    return f"paiq-{readable}-{digest}"


def placed_tasks(plan: Plan) -> tuple[TaskRecord, ...]:
    return tuple(
        TaskRecord(role=t.role, index=t.index, node_id=t.node_id, ip=t.ip, gpus=t.gpus, ports=t.ports)
        for t in plan.tasks
    )


def task_specs(job: JobRecord, plan: Plan, default_fs_uri: str) -> list[TaskSpec]:
    config = job.config
    paths = resolve_paths(config, job.user, default_fs_uri)
    specs: list[TaskSpec] = []
    for placement in plan.tasks:
        role = config.role(placement.role)
        name = container_name(job.id, job.attempt, role.name, placement.index)
        specs.append(TaskSpec(
            job_id=job.id, attempt=job.attempt, user=job.user, virtual_cluster=job.virtual_cluster,
            role=role.name, index=placement.index, image=config.image, command=role.command,
            env=build_task_env(config, plan, user=job.user, role=role, index=placement.index,
                               paths=paths, container_id=name),
            cpus=role.cpu_number, memory_mb=role.memory_mb, shm_mb=role.shm_mb,
            gpus=placement.gpus, ports=placement.ports,
            # As the user wrote them (after substitution): the launcher resolves them under the storage root.
            auth_file=paths.auth_file,
            code_dir=paths.code_dir,
            is_debug=config.is_debug(),
        ))
    return specs
