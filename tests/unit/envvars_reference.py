"""The task environment builder as it was before "Scale II", kept verbatim as the reference the new one
is tested against (tests/unit/test_envvars.py): every task rebuilt every role's table and found each peer
by a linear search of the plan (O(T^3) for a job of T tasks)."""

from __future__ import annotations

from shared.envvars import JobPaths
from shared.jobconfig import JobConfig, TaskRole, env_name, env_value
from shared.placement import Plan, TaskPlacement


def _old_count(value: int | None) -> str:
    return "" if value is None else str(value)


def _old_for_task(plan: Plan, role: str, index: int) -> TaskPlacement:
    for t in plan.tasks:
        if t.role == role and t.index == index:
            return t
    raise KeyError(f"{role}[{index}]")


def _old_role_env(role: TaskRole, plan: Plan) -> dict[str, str]:
    r = env_name(role.name)
    env = {
        f"PAI_TASK_ROLE_TASK_COUNT_{r}": str(role.task_number),
        f"PAI_RESOURCE_{r}": f"{role.gpu_number},{role.cpu_number},{role.memory_mb},{role.shm_mb}",
        f"PAI_MIN_FAILED_TASK_COUNT_{r}": _old_count(role.min_failed_task_count),
        f"PAI_MIN_SUCCEEDED_TASK_COUNT_{r}": _old_count(role.min_succeeded_task_count),
    }
    hosts: list[str] = []
    for i in range(role.task_number):
        t = _old_for_task(plan, role.name, i)
        first = next((ps[0] for ps in t.ports.values() if ps), None)
        hosts.append(t.ip if first is None else f"{t.ip}:{first}")
        env[f"PAI_HOST_IP_{r}_{i}"] = t.ip
        for label, ports in t.ports.items():
            joined = ",".join(map(str, ports))
            env[f"PAI_PORT_LIST_{r}_{i}_{env_name(label)}"] = joined
            env[f"PAI_{r}_{i}_{env_name(label)}_PORT"] = joined
    env[f"PAI_TASK_ROLE_{r}_HOST_LIST"] = ",".join(hosts)
    return env


def old_build_task_env(config: JobConfig, plan: Plan, *, user: str, role: TaskRole, index: int,
                       paths: JobPaths, container_id: str) -> dict[str, str]:
    me = _old_for_task(plan, role.name, index)
    env: dict[str, str] = {
        "PAI_WORK_DIR": "/pai",
        "PAI_DEFAULT_FS_URI": paths.default_fs_uri,
        "PAI_JOB_NAME": config.job_name,
        "PAI_JOB_VC_NAME": config.virtual_cluster,
        "PAI_USER_NAME": user,
        "PAI_DATA_DIR": paths.data_dir,
        "PAI_OUTPUT_DIR": paths.output_dir,
        "PAI_CODE_DIR": paths.code_dir,
        "PAI_CURRENT_TASK_ROLE_NAME": role.name,
        "PAI_CURRENT_TASK_ROLE_TASK_COUNT": str(role.task_number),
        "PAI_CURRENT_TASK_ROLE_CPU_COUNT": str(role.cpu_number),
        "PAI_CURRENT_TASK_ROLE_MEM_MB": str(role.memory_mb),
        "PAI_CURRENT_TASK_ROLE_SHM_MB": str(role.shm_mb),
        "PAI_CURRENT_TASK_ROLE_GPU_COUNT": str(role.gpu_number),
        "PAI_CURRENT_TASK_ROLE_MIN_FAILED_TASK_COUNT": _old_count(role.min_failed_task_count),
        "PAI_CURRENT_TASK_ROLE_MIN_SUCCEEDED_TASK_COUNT": _old_count(role.min_succeeded_task_count),
        "PAI_CURRENT_TASK_ROLE_CURRENT_TASK_INDEX": str(index),
        "PAI_TASK_INDEX": str(index),
        "PAI_CONTAINER_ID": container_id,
        "PAI_JOB_TASK_COUNT": str(config.total_tasks),
        "PAI_JOB_TASK_ROLE_COUNT": str(len(config.task_roles)),
        "PAI_JOB_TASK_ROLE_LIST": ",".join(r.name for r in config.task_roles),
        "PAI_TASK_ROLE_COUNT": str(len(config.task_roles)),
        "PAI_TASK_ROLE_LIST": ",".join(r.name for r in config.task_roles),
        "PAI_CONTAINER_HOST_IP": me.ip,
        "PAI_CONTAINER_HOST_PORT_LIST": ";".join(f"{lb}:{','.join(map(str, ps))}" for lb, ps in me.ports.items()),
    }
    for label, ports in me.ports.items():
        env[f"PAI_CONTAINER_HOST_{env_name(label)}_PORT_LIST"] = ",".join(map(str, ports))
    for label, var in (("http", "PAI_CONTAINER_HOST_PORT"), ("ssh", "PAI_CONTAINER_SSH_PORT")):
        if me.ports.get(label):
            env[var] = str(me.ports[label][0])
    for other in config.task_roles:
        env.update(_old_role_env(other, plan))
    env.update({k: env_value(v) for k, v in config.job_envs.items()})
    if me.gpus:
        env["NVIDIA_VISIBLE_DEVICES"] = env["CUDA_VISIBLE_DEVICES"] = ",".join(map(str, me.gpus))
    return env
