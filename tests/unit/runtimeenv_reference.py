"""What OpenPAI v1.x gave one task, transcribed from its three programs, as the reference the builder of
:mod:`shared.tasks.runtimeenv` (through :mod:`shared.tasks.envvars`) is tested against
(tests/unit/test_runtimeenv.py).

In the order a task's shell saw them: rest-server's ``models/v2/job/runtime-env.js``
(``generateFrameworkEnv``, every container's env), ``k8s.js`` ``generateTaskRole`` (the role and index),
frameworkcontroller's ``FC_*`` annotations, then openpai-runtime's ``init.d/framework_parser.py``
``generate_runtime_env`` (hosts and ports, sourced before the user's commands, so it wins). Kept naive
on purpose: every task walks every role's tasks and finds each by a linear search of the plan. The
framework knew a role as ``convertName`` (``<c>``) and framework_parser used that name; rest-server used
the name as written. paiq's deliberate choices are marked ``# paiq``.
"""

from __future__ import annotations

import hashlib

from shared.jobconfig.model import JobConfig, TaskRole
from shared.scheduling.placement import Plan, TaskPlacement


def convert_name(name: str) -> str:
    """``name.toLowerCase().replace(/[^a-z0-9]/g, '')`` (rest-server ``models/v2/utils/name.js``)."""
    return "".join(ch for ch in name.lower() if ch in "abcdefghijklmnopqrstuvwxyz0123456789")


def _for_task(plan: Plan, role: str, index: int) -> TaskPlacement:
    for t in plan.tasks:
        if t.role == role and t.index == index:
            return t
    raise KeyError(f"{role}[{index}]")


def _min_count(value: int | None) -> str:
    return "-1" if value is None else str(value)  # paiq: a count that never triggers, as v2 wrote it


def framework_env(config: JobConfig, *, user: str, default_fs_uri: str) -> list[tuple[str, str]]:
    """``generateFrameworkEnv(frameworkName, config, virtualCluster)``."""
    framework = f"{user}~{config.job_name}"
    roles = [r.name for r in config.task_roles]
    lines = [("PAI_FRAMEWORK_NAME", framework), ("PAI_JOB_NAME", framework), ("PAI_USER_NAME", user),
             ("PAI_DEFAULT_FS_URI", default_fs_uri),  # paiq: its default file system ('' in v1.x)
             ("PAI_TASK_ROLE_COUNT", str(len(roles))), ("PAI_TASK_ROLE_LIST", ",".join(roles)),
             ("PAI_VIRTUAL_CLUSTER", config.virtual_cluster)]
    tasks = 0
    for role in config.task_roles:
        tasks += role.task_number
        lines += [(f"PAI_TASK_ROLE_TASK_COUNT_{role.name}", str(role.task_number)),
                  # paiq: the shm the task gets (v1.x wrote 0 where shmMB was not written)
                  (f"PAI_RESOURCE_{role.name}",
                   f"{role.gpu_number},{role.cpu_number},{role.memory_mb},{role.shm_mb}"),
                  (f"PAI_MIN_FAILED_TASK_COUNT_{role.name}", _min_count(role.min_failed_task_count)),
                  (f"PAI_MIN_SUCCEEDED_TASK_COUNT_{role.name}", _min_count(role.min_succeeded_task_count))]
    lines += [("PAI_USERNAME", user), ("PAI_TASKS_NUM", str(tasks)), ("PAI_JOB_TASK_COUNT", str(tasks)),
              ("PAI_TASK_ROLES_NUM", str(len(roles))), ("PAI_JOB_TASK_ROLE_COUNT", str(len(roles))),
              ("PAI_JOB_TASK_ROLE_LIST", ",".join(roles))]
    return lines


def frameworkcontroller_env(config: JobConfig, *, user: str, role: TaskRole, index: int,
                            attempt: int) -> list[tuple[str, str]]:
    """The annotations paiq keeps (``encodeName``: the md5 of ``user~name``; ``GetPodName``)."""
    fc_name = hashlib.md5(f"{user}~{config.job_name}".encode()).hexdigest()
    c = convert_name(role.name)
    return [("FC_FRAMEWORK_NAME", fc_name), ("FC_TASKROLE_NAME", c), ("FC_TASK_INDEX", str(index)),
            ("FC_POD_NAME", f"{fc_name}-{c}-{index}"), ("FC_FRAMEWORK_ATTEMPT_ID", str(attempt)),
            ("FC_TASK_ATTEMPT_ID", "0")]


def framework_parser_env(config: JobConfig, plan: Plan, *, role: TaskRole, index: int) -> list[tuple[str, str]]:
    """``generate_runtime_env``: every role's tasks' ports and hosts (``<c>``), this task's own."""
    lines: list[tuple[str, str]] = []
    instances = []
    for other in config.task_roles:
        name = convert_name(other.name)
        host_list = []
        for i in range(other.task_number):
            task = _for_task(plan, other.name, i)
            instances.append(f"{name}:{i}")
            for port, numbers in task.ports.items():
                joined = ",".join(map(str, numbers))
                lines += [(f"PAI_PORT_LIST_{name}_{i}_{port}", joined), (f"PAI_{name}_{i}_{port}_PORT", joined)]
            lines.append((f"PAI_HOST_IP_{name}_{i}", task.ip))
            host_list.append(f"{task.ip}:{task.ports['http'][0]}")
            if other.name == role.name and i == index:
                http, ssh = str(task.ports["http"][0]), str(task.ports["ssh"][0])
                lines += [("PAI_CURRENT_CONTAINER_IP", task.ip), ("PAI_CURRENT_CONTAINER_PORT", http),
                          ("PAI_CONTAINER_HOST_IP", task.ip), ("PAI_CONTAINER_HOST_PORT", http),
                          ("PAI_CONTAINER_SSH_PORT", ssh)]
                port_str = ""
                for port, numbers in task.ports.items():
                    lines.append((f"PAI_CONTAINER_HOST_{port}_PORT_LIST", ",".join(map(str, numbers))))
                    port_str += f"{port}:{','.join(map(str, numbers))};"
                lines.append(("PAI_CONTAINER_HOST_PORT_LIST", port_str))
        lines.append((f"PAI_TASK_ROLE_{name}_HOST_LIST", ",".join(host_list)))
    lines.append(("PAI_TASK_ROLE_INSTANCES", ",".join(instances)))
    return lines


def runtime_task_env(config: JobConfig, plan: Plan, *, user: str, role: TaskRole, index: int,
                     default_fs_uri: str, attempt: int) -> dict[str, str]:
    """One task's v1.x variables (a later line wins, as the sourced script's exports did)."""
    lines = framework_env(config, user=user, default_fs_uri=default_fs_uri)
    lines += [("PAI_CURRENT_TASK_ROLE_NAME", role.name), ("PAI_CURRENT_TASK_ROLE_CURRENT_TASK_INDEX", str(index)),
              ("PAI_TASK_INDEX", str(index))]
    lines += frameworkcontroller_env(config, user=user, role=role, index=index, attempt=attempt)
    lines += framework_parser_env(config, plan, role=role, index=index)
    return dict(lines)
