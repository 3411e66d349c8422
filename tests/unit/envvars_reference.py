"""OpenPAI v0.14's container script (rest-server ``src/templates/yarnContainerScript.mustache`` and
``dockerContainerScript.mustache``), transcribed line by line for one task, as the reference the O(tasks)
builder of :mod:`shared.tasks.envvars` is tested against (tests/unit/test_envvars.py).

The script appended ``NAME=value`` lines to an env file in this order and Docker read it (a later line
wins); jobEnvs came last. It is kept naive on purpose: every task rebuilds every role's table and finds
each peer by a linear search of the plan. Where the seeds and the script disagree the seeds win, marked
``# seed`` below: ``PAI_JOB_NAME`` is the config's jobName (the script had ``user~jobName``) and the port
list has no trailing ``;``. paiq's own additions are marked ``# paiq``.
"""

from __future__ import annotations

from shared.jobconfig.model import JobConfig, TaskRole, env_name, env_value
from shared.scheduling.placement import Plan, TaskPlacement
from shared.tasks.envvars import JobPaths


def _count(value: int | None) -> str:
    return "" if value is None else str(value)


def _for_task(plan: Plan, role: str, index: int) -> TaskPlacement:
    for t in plan.tasks:
        if t.role == role and t.index == index:
            return t
    raise KeyError(f"{role}[{index}]")


def _first(ports: dict[str, tuple[int, ...]], label: str) -> str:
    return str(ports[label][0]) if ports.get(label) else ""


def _get_host_list(config: JobConfig, plan: Plan) -> list[tuple[str, str]]:
    """The script's ``get_host_list``: for every role, every task's IP and ports, then the role's count
    and host list (``ip:<http port>``)."""
    lines: list[tuple[str, str]] = []
    for role in config.task_roles:
        r = env_name(role.name)
        hosts = []
        for i in range(role.task_number):
            t = _for_task(plan, role.name, i)
            lines.append((f"PAI_HOST_IP_{r}_{i}", t.ip))
            http = _first(t.ports, "http")
            hosts.append(f"{t.ip}:{http}" if http else t.ip)
            for label, ports in t.ports.items():
                joined = ",".join(map(str, ports))
                lines.append((f"PAI_PORT_LIST_{r}_{i}_{env_name(label)}", joined))
                lines.append((f"PAI_{r}_{i}_{env_name(label)}_PORT", joined))
        lines.append((f"PAI_TASK_ROLE_TASK_COUNT_{r}", str(role.task_number)))
        lines.append((f"PAI_TASK_ROLE_{r}_HOST_LIST", ",".join(hosts)))
    return lines


def script_task_env(config: JobConfig, plan: Plan, *, user: str, role: TaskRole, index: int,
                    paths: JobPaths, container_id: str, app: str) -> dict[str, str]:
    me = _for_task(plan, role.name, index)
    roles = ",".join(r.name for r in config.task_roles)
    resource = f"{role.gpu_number},{role.cpu_number},{role.memory_mb},{role.shm_mb}"
    lines: list[tuple[str, str]] = [
        ("APP_ID", app),
        ("FRAMEWORK_NAME", f"{user}~{config.job_name}"),
        ("HADOOP_USER_NAME", user),
        ("PAI_TASK_INDEX", str(index)),
        ("PAI_CONTAINER_HOST_IP", me.ip),
        ("PAI_CONTAINER_HOST_PORT_LIST", ";".join(f"{lb}:{','.join(map(str, ps))}" for lb, ps in me.ports.items())),
        ("PAI_CONTAINER_ID", container_id),
        ("PAI_JOB_NAME", config.job_name),  # seed
        ("PAI_USER_NAME", user),
        ("PAI_DEFAULT_FS_URI", paths.default_fs_uri),
        ("PAI_TASK_ROLE_COUNT", str(len(config.task_roles))),
        ("PAI_TASK_ROLE_LIST", roles),
        ("PAI_RESOURCE", resource),
        (f"PAI_MIN_FAILED_TASK_COUNT_{env_name(role.name)}", _count(role.min_failed_task_count)),
        (f"PAI_MIN_SUCCEEDED_TASK_COUNT_{env_name(role.name)}", _count(role.min_succeeded_task_count)),
        ("PAI_CURRENT_TASK_ROLE_NAME", role.name),
        ("PAI_CURRENT_TASK_ROLE_CURRENT_TASK_INDEX", str(index)),
    ]
    lines += [(f"PAI_CONTAINER_HOST_{env_name(lb)}_PORT_LIST", ",".join(map(str, ps))) for lb, ps in me.ports.items()]
    lines += [("PAI_CONTAINER_HOST_PORT", _first(me.ports, "http")),
              ("PAI_CONTAINER_SSH_PORT", _first(me.ports, "ssh"))]
    lines += _get_host_list(config, plan)
    lines += [
        ("PAI_CURRENT_CONTAINER_IP", me.ip),
        ("PAI_TASK_ROLE_INDEX", str(index)),
        ("PAI_USERNAME", user),
        ("PAI_DATA_DIR", paths.data_dir),
        ("PAI_OUTPUT_DIR", paths.output_dir),
        ("PAI_CODE_DIR", paths.code_dir),
        ("PAI_TASK_ROLE_NAME", role.name),
        ("PAI_TASK_ROLE_NUM", str(role.task_number)),
        ("PAI_CURRENT_TASK_ROLE_TASK_COUNT", str(role.task_number)),
        ("PAI_TASK_CPU_NUM", str(role.cpu_number)),
        ("PAI_CURRENT_TASK_ROLE_CPU_COUNT", str(role.cpu_number)),
        ("PAI_TASK_MEM_MB", str(role.memory_mb)),
        ("PAI_CURRENT_TASK_ROLE_MEM_MB", str(role.memory_mb)),
        ("PAI_TASK_GPU_NUM", str(role.gpu_number)),
        ("PAI_CURRENT_TASK_ROLE_GPU_COUNT", str(role.gpu_number)),
        ("PAI_CURRENT_TASK_ROLE_SHM_MB", str(role.shm_mb)),
        ("PAI_CURRENT_TASK_ROLE_MIN_FAILED_TASK_COUNT", _count(role.min_failed_task_count)),
        ("PAI_CURRENT_TASK_ROLE_MIN_SUCCEEDED_TASK_COUNT", _count(role.min_succeeded_task_count)),
        ("PAI_TASKS_NUM", str(config.total_tasks)),
        ("PAI_JOB_TASK_COUNT", str(config.total_tasks)),
        ("PAI_TASK_ROLES_NUM", str(len(config.task_roles))),
        ("PAI_JOB_TASK_ROLE_COUNT", str(len(config.task_roles))),
        ("PAI_TASK_ROLE_LIST", roles),
        ("PAI_JOB_TASK_ROLE_LIST", roles),
        ("PAI_CURRENT_CONTAINER_PORT", _first(me.ports, "http")),
    ]
    # paiq: seed 000's variables the script did not write, and every role's figures (seed 002)
    lines += [("PAI_WORK_DIR", "/pai"), ("PAI_JOB_VC_NAME", config.virtual_cluster)]
    for other in config.task_roles:
        r = env_name(other.name)
        lines += [(f"PAI_RESOURCE_{r}", f"{other.gpu_number},{other.cpu_number},{other.memory_mb},{other.shm_mb}"),
                  (f"PAI_MIN_FAILED_TASK_COUNT_{r}", _count(other.min_failed_task_count)),
                  (f"PAI_MIN_SUCCEEDED_TASK_COUNT_{r}", _count(other.min_succeeded_task_count))]
    # jobEnvs last, as the script appended them (paiq: never NVIDIA_VISIBLE_DEVICES)
    lines += [(k, env_value(v)) for k, v in config.job_envs.items() if k != "NVIDIA_VISIBLE_DEVICES"]
    if not me.gpus:  # paiq: a task without GPUs is handed none by a default NVIDIA runtime
        lines.append(("NVIDIA_VISIBLE_DEVICES", "void"))
    return dict(lines)
