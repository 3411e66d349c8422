"""The PAI_* environment of a task, built purely from the job config and its placement plan.

Both generations of OpenPAI's variables are served (seed 000's table and seed 002/004's), plus the
aliases of OPENPAI.md. Names carry role names and port labels, which may hold ``.`` and ``~``; any
character not allowed in a variable name is replaced by ``_`` (``ps.server`` -> ``PAI_TASK_ROLE_ps_server_HOST_LIST``).
jobEnvs go on top, verbatim, except over the GPU variables. A null minFailed/minSucceededTaskCount is an
empty value.

A job's environment is built once (:func:`job_environment`, O(tasks)): what every task sees the same
(the job's variables, every role's size, resources, hosts and ports, jobEnvs) is one mapping, and each
task adds a few variables of its own (:meth:`JobEnvironment.own`). A task's whole environment is
:func:`task_environment` of the two, the one rule the launcher applies too.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from shared.jobconfig import JobConfig, TaskRole, env_name, env_value
from shared.placement import Plan, TaskPlacement

WORK_DIR = "/pai"
CODE_MOUNT = "/pai/code"
# Set from the task's own GPUs after jobEnvs: a job must not widen its own GPU isolation.
GPU_VARIABLES = ("NVIDIA_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES")


@dataclass(frozen=True)
class JobPaths:
    """The job's directories after substitution (see :func:`resolve_paths`)."""

    default_fs_uri: str
    auth_file: str
    data_dir: str
    output_dir: str
    code_dir: str


def substitute(value: str, *, default_fs_uri: str, job_name: str, user: str) -> str:
    """Replace ``$PAI_DEFAULT_FS_URI``, ``$PAI_JOB_NAME`` and ``$PAI_USER_NAME`` (also ``${...}``)."""
    known = {"PAI_DEFAULT_FS_URI": default_fs_uri, "PAI_JOB_NAME": job_name, "PAI_USER_NAME": user}

    def repl(m: re.Match[str]) -> str:
        name = m.group(1) or m.group(2)
        return known.get(name, m.group(0))

    return re.sub(r"\$\{(\w+)\}|\$(\w+)", repl, value)


def resolve_paths(config: JobConfig, user: str, default_fs_uri: str) -> JobPaths:
    def sub(v: str) -> str:
        return substitute(v, default_fs_uri=default_fs_uri, job_name=config.job_name, user=user)

    output = config.output_dir or f"{default_fs_uri.rstrip('/')}/Output/{user}/{config.job_name}"
    return JobPaths(default_fs_uri=default_fs_uri, auth_file=sub(config.auth_file),
                    data_dir=sub(config.data_dir), output_dir=sub(output), code_dir=sub(config.code_dir))


def _count(value: int | None) -> str:
    return "" if value is None else str(value)


def _port_list(ports: dict[str, tuple[int, ...]]) -> str:
    return ";".join(f"{label}:{','.join(map(str, ps))}" for label, ps in ports.items())


def task_environment(job_env: Mapping[str, str], own: Mapping[str, str]) -> dict[str, str]:
    """A task's whole environment: the job's shared variables, then the task's own over them.

    The split keeps OpenPAI's precedence: jobEnvs are part of ``job_env`` (over every platform variable
    there) and ``own`` leaves out what jobEnvs set, except the GPU variables, which ``own`` always
    carries for a task given GPUs. A launch message of an older scheduler has no ``job_env`` and the
    whole environment in ``own``: the same rule serves it.
    """
    return {**job_env, **own}


@dataclass(frozen=True)
class JobEnvironment:
    """A job's environment, built once: ``shared`` for every task, :meth:`own` per task."""

    config: JobConfig
    plan: Plan
    shared: dict[str, str]

    def own(self, role: TaskRole, index: int, container_id: str) -> dict[str, str]:
        """What only this task sees (its role's figures, its index, host, ports and GPUs), less the
        names jobEnvs set (they are in ``shared``) except the GPU variables."""
        me = self.plan.for_task(role.name, index)
        env = task_variables(role, index, me, container_id)
        job_envs = self.config.job_envs
        if job_envs:
            env = {k: v for k, v in env.items() if k not in job_envs}
        if me.gpus:  # after jobEnvs: a job must not widen its own GPU isolation
            env[GPU_VARIABLES[0]] = env[GPU_VARIABLES[1]] = ",".join(map(str, me.gpus))
        return env

    def task_env(self, role: TaskRole, index: int, container_id: str) -> dict[str, str]:
        return task_environment(self.shared, self.own(role, index, container_id))


def job_environment(config: JobConfig, plan: Plan, *, user: str, paths: JobPaths) -> JobEnvironment:
    """The shared part of every task's environment: O(tasks of the job), built once per job."""
    shared = job_variables(config, user=user, paths=paths)
    for role in config.task_roles:
        shared.update(_role_env(role, plan))
    shared.update(job_env_values(config))
    return JobEnvironment(config=config, plan=plan, shared=shared)


def job_variables(config: JobConfig, *, user: str, paths: JobPaths) -> dict[str, str]:
    """The job's own variables (no role's, no task's)."""
    roles = ",".join(r.name for r in config.task_roles)
    return {
        "PAI_WORK_DIR": WORK_DIR,
        "PAI_DEFAULT_FS_URI": paths.default_fs_uri,
        "PAI_JOB_NAME": config.job_name,
        "PAI_JOB_VC_NAME": config.virtual_cluster,
        "PAI_USER_NAME": user,
        "PAI_DATA_DIR": paths.data_dir,
        "PAI_OUTPUT_DIR": paths.output_dir,
        "PAI_CODE_DIR": paths.code_dir,
        "PAI_JOB_TASK_COUNT": str(config.total_tasks),
        "PAI_JOB_TASK_ROLE_COUNT": str(len(config.task_roles)),
        "PAI_JOB_TASK_ROLE_LIST": roles,
        "PAI_TASK_ROLE_COUNT": str(len(config.task_roles)),
        "PAI_TASK_ROLE_LIST": roles,
    }


def job_env_values(config: JobConfig) -> dict[str, str]:
    return {k: env_value(v) for k, v in config.job_envs.items()}


def build_task_env(config: JobConfig, plan: Plan, *, user: str, role: TaskRole, index: int,
                   paths: JobPaths, container_id: str) -> dict[str, str]:
    """One task's whole environment (O(tasks of the job)); for many tasks build :func:`job_environment` once."""
    return job_environment(config, plan, user=user, paths=paths).task_env(role, index, container_id)


def task_variables(role: TaskRole, index: int, me: TaskPlacement, container_id: str) -> dict[str, str]:
    """What is particular to one task (jobEnvs and GPUs aside)."""
    env = {
        "PAI_CURRENT_TASK_ROLE_NAME": role.name,
        "PAI_CURRENT_TASK_ROLE_TASK_COUNT": str(role.task_number),
        "PAI_CURRENT_TASK_ROLE_CPU_COUNT": str(role.cpu_number),
        "PAI_CURRENT_TASK_ROLE_MEM_MB": str(role.memory_mb),
        "PAI_CURRENT_TASK_ROLE_SHM_MB": str(role.shm_mb),
        "PAI_CURRENT_TASK_ROLE_GPU_COUNT": str(role.gpu_number),
        "PAI_CURRENT_TASK_ROLE_MIN_FAILED_TASK_COUNT": _count(role.min_failed_task_count),
        "PAI_CURRENT_TASK_ROLE_MIN_SUCCEEDED_TASK_COUNT": _count(role.min_succeeded_task_count),
        "PAI_CURRENT_TASK_ROLE_CURRENT_TASK_INDEX": str(index),
        "PAI_TASK_INDEX": str(index),
        "PAI_CONTAINER_ID": container_id,
        "PAI_CONTAINER_HOST_IP": me.ip,
        "PAI_CONTAINER_HOST_PORT_LIST": _port_list(me.ports),
    }
    for label, ports in me.ports.items():
        env[f"PAI_CONTAINER_HOST_{env_name(label)}_PORT_LIST"] = ",".join(map(str, ports))
    for label, var in (("http", "PAI_CONTAINER_HOST_PORT"), ("ssh", "PAI_CONTAINER_SSH_PORT")):
        if me.ports.get(label):
            env[var] = str(me.ports[label][0])
    return env


def role_figures(role: TaskRole) -> dict[str, str]:
    """A role's size and resources, as every task sees them."""
    r = env_name(role.name)
    return {
        f"PAI_TASK_ROLE_TASK_COUNT_{r}": str(role.task_number),
        f"PAI_RESOURCE_{r}": f"{role.gpu_number},{role.cpu_number},{role.memory_mb},{role.shm_mb}",
        f"PAI_MIN_FAILED_TASK_COUNT_{r}": _count(role.min_failed_task_count),
        f"PAI_MIN_SUCCEEDED_TASK_COUNT_{r}": _count(role.min_succeeded_task_count),
    }


# The names of the variables about each task of a role, every task sees them all (shared.envsize sizes
# them with ``index=""``): its host, its ports per label (under two names), and the role's host list.
def host_ip_name(r: str, index: str) -> str:
    return f"PAI_HOST_IP_{r}_{index}"


def port_names(r: str, index: str, label: str) -> tuple[str, str]:
    return f"PAI_PORT_LIST_{r}_{index}_{label}", f"PAI_{r}_{index}_{label}_PORT"


def host_list_name(r: str) -> str:
    return f"PAI_TASK_ROLE_{r}_HOST_LIST"


def _role_env(role: TaskRole, plan: Plan) -> dict[str, str]:
    """The variables every task sees about one role (its size, resources, hosts and ports)."""
    r = env_name(role.name)
    env = role_figures(role)
    hosts: list[str] = []
    for i in range(role.task_number):
        t = plan.for_task(role.name, i)
        first = next((ps[0] for ps in t.ports.values() if ps), None)
        hosts.append(t.ip if first is None else f"{t.ip}:{first}")
        env[host_ip_name(r, str(i))] = t.ip
        for label, ports in t.ports.items():
            joined = ",".join(map(str, ports))
            for name in port_names(r, str(i), env_name(label)):
                env[name] = joined
    env[host_list_name(r)] = ",".join(hosts)
    return env
