"""The PAI_* environment of a task, built purely from the job config and its placement plan.

Every variable OpenPAI v0.14's container script (rest-server ``yarnContainerScript.mustache``) exported,
under all of its names: seed 000's table, seed 002/004's, and the script's backward-compatible aliases.
Where the seeds and the script disagree the seeds win: ``PAI_JOB_NAME`` is the config's jobName (the
script had ``user~jobName``, which is ``FRAMEWORK_NAME`` here) and ``PAI_CONTAINER_HOST_PORT_LIST`` has
no trailing ``;``. Every role has an ``http`` and an ``ssh`` port (:attr:`TaskRole.ports`); host lists
are ``ip:<http port>``. Names carry role names and port labels, which may hold ``.`` and ``~``; any
character not allowed in a variable name is replaced by ``_`` (``ps.server`` ->
``PAI_TASK_ROLE_ps_server_HOST_LIST``). jobEnvs go on top, verbatim, except ``NVIDIA_VISIBLE_DEVICES``
(see :func:`gpu_variables`). A null minFailed/minSucceededTaskCount is an empty value.

A job's environment is built once (:func:`job_environment`, O(tasks)): what every task sees the same
(the job's variables, every role's size, resources, hosts and ports, jobEnvs) is one mapping, and each
task adds a few variables of its own (:meth:`JobEnvironment.own`). A task's whole environment is
:func:`task_environment` of the two, the one rule the launcher applies too.

A job submitted in protocol v2 gets OpenPAI v1.x's variables on top (:mod:`shared.tasks.runtimeenv`:
names, values and the role-name spellings); a v1 job's environment is v0.14's alone.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from shared.jobconfig.model import JobConfig, TaskRole, env_name, env_value
from shared.scheduling.placement import Plan, TaskPlacement
from shared.tasks import runtimeenv

WORK_DIR = "/pai"
CODE_MOUNT = "/pai/code"
NVIDIA_VISIBLE_DEVICES = "NVIDIA_VISIBLE_DEVICES"
NO_GPUS = "void"  # NVIDIA's runtime then hands the container no GPU and no driver


@dataclass(frozen=True)
class JobPaths:
    """The job's directories after substitution (see :func:`resolve_paths`)."""

    default_fs_uri: str
    auth_file: str
    data_dir: str
    output_dir: str
    code_dir: str


def substitute(value: str, *, default_fs_uri: str, job_name: str, user: str) -> str:
    """Replace ``$PAI_DEFAULT_FS_URI``, ``$PAI_JOB_NAME`` and ``$PAI_USER_NAME``/``$PAI_USERNAME`` (also
    ``${...}``), as OpenPAI's rest-server did in authFile, dataDir, outputDir and codeDir."""
    known = {"PAI_DEFAULT_FS_URI": default_fs_uri, "PAI_JOB_NAME": job_name, "PAI_USER_NAME": user,
             "PAI_USERNAME": user}

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


def _port_list(ports: Mapping[str, tuple[int, ...]]) -> str:
    """``label:p1,p2;label2:p3``: seed 000's format (frameworklauncher added a trailing ``;``)."""
    return ";".join(f"{label}:{','.join(map(str, ps))}" for label, ps in ports.items())


def _first(ports: Mapping[str, tuple[int, ...]], label: str) -> str:
    found = ports.get(label)
    return str(found[0]) if found else ""


def app_id(job_id: str, attempt: int) -> str:
    """What a task sees as ``APP_ID``: one attempt of one job (YARN gave each retry a new application)."""
    return f"{job_id}-{attempt}"


def task_environment(job_env: Mapping[str, str], own: Mapping[str, str]) -> dict[str, str]:
    """A task's whole environment: the job's shared variables, then the task's own over them.

    The split keeps OpenPAI's precedence: jobEnvs are part of ``job_env`` (over every platform variable
    there) and ``own`` leaves out what jobEnvs set, except ``NVIDIA_VISIBLE_DEVICES``, which ``own``
    carries for a task without GPUs. A launch message of an older scheduler has no ``job_env`` and the
    whole environment in ``own``: the same rule serves it.
    """
    return {**job_env, **own}


@dataclass(frozen=True)
class JobEnvironment:
    """A job's environment, built once: ``shared`` for every task, :meth:`own` per task."""

    config: JobConfig
    plan: Plan
    shared: dict[str, str]
    fc_name: str = ""  # a v2 job's FC_FRAMEWORK_NAME: its tasks get v1.x's variables ("": a v1 job)

    def own(self, role: TaskRole, index: int, container_id: str, task_attempt: int = 0) -> dict[str, str]:
        """What only this task sees (its role's figures, its index, host, ports and GPUs; a v2 job's, which
        run of the task this is), less the names jobEnvs set (they are in ``shared``)."""
        me = self.plan.for_task(role.name, index)
        env = task_variables(role, index, me, container_id)
        if self.fc_name:
            env.update(runtimeenv.task_variables(role, me, fc_name=self.fc_name, task_attempt=task_attempt))
        job_envs = self.config.job_envs
        if job_envs:
            env = {k: v for k, v in env.items() if k not in job_envs}
        env.update(gpu_variables(me.gpus))
        return env

    def task_env(self, role: TaskRole, index: int, container_id: str) -> dict[str, str]:
        return task_environment(self.shared, self.own(role, index, container_id))


def gpu_variables(gpus: tuple[int, ...]) -> dict[str, str]:
    """What a task is told about GPUs, after jobEnvs (which may not set ``NVIDIA_VISIBLE_DEVICES``).

    A task given GPUs gets them from the engine as a device request, and the engine itself sets
    ``NVIDIA_VISIBLE_DEVICES`` to their host ids for NVIDIA's runtime: paiq adds nothing, so the
    variable is not doubled. Inside, CUDA numbers the task's GPUs from 0 and ``CUDA_VISIBLE_DEVICES``
    is left unset (as OpenPAI did; jobEnvs may narrow it). A task without GPUs gets
    ``NVIDIA_VISIBLE_DEVICES=void``: on a node whose default runtime is NVIDIA's, an image that sets
    ``all`` (CUDA images do) would otherwise see every GPU of the node.
    """
    return {} if gpus else {NVIDIA_VISIBLE_DEVICES: NO_GPUS}


def job_environment(config: JobConfig, plan: Plan, *, user: str, paths: JobPaths, app: str,
                    attempt: int = 0) -> JobEnvironment:
    """The shared part of every task's environment: O(tasks of the job), built once per job.
    ``app`` is the attempt's :func:`app_id` (``attempt`` its number, which a v2 job's tasks see)."""
    shared = job_variables(config, user=user, paths=paths, app=app)
    for role in config.task_roles:
        shared.update(_role_env(role, plan))
    fc_name = ""
    if runtimeenv.speaks_v1x(config):  # protocol v2: v1.x's names over v0.14's, each role's peers under <c> too
        shared.update(runtimeenv.job_variables(config, user=user, attempt=attempt))
        shared.update(runtimeenv.task_role_instances(config))
        for role in config.task_roles:
            shared.update(runtimeenv.role_figures(role))
            c = runtimeenv.framework_role_name(role.name)
            if c != env_name(role.name):
                shared.update(peer_tables(role, plan, c))
        fc_name = runtimeenv.fc_framework_name(user, config.job_name)
    shared.update(job_env_values(config))  # (a v2 job has none)
    return JobEnvironment(config=config, plan=plan, shared=shared, fc_name=fc_name)


def job_variables(config: JobConfig, *, user: str, paths: JobPaths, app: str) -> dict[str, str]:
    """The job's own variables (no role's, no task's); the names of both of OpenPAI's generations."""
    roles = ",".join(r.name for r in config.task_roles)
    tasks, role_count = str(config.total_tasks), str(len(config.task_roles))
    return {
        "APP_ID": app,
        "FRAMEWORK_NAME": f"{user}~{config.job_name}",
        "HADOOP_USER_NAME": user,
        "PAI_WORK_DIR": WORK_DIR,
        "PAI_DEFAULT_FS_URI": paths.default_fs_uri,
        "PAI_JOB_NAME": config.job_name,
        "PAI_JOB_VC_NAME": config.virtual_cluster,
        "PAI_USER_NAME": user,
        "PAI_USERNAME": user,
        "PAI_DATA_DIR": paths.data_dir,
        "PAI_OUTPUT_DIR": paths.output_dir,
        "PAI_CODE_DIR": paths.code_dir,
        "PAI_JOB_TASK_COUNT": tasks,
        "PAI_TASKS_NUM": tasks,
        "PAI_JOB_TASK_ROLE_COUNT": role_count,
        "PAI_TASK_ROLE_COUNT": role_count,
        "PAI_TASK_ROLES_NUM": role_count,
        "PAI_JOB_TASK_ROLE_LIST": roles,
        "PAI_TASK_ROLE_LIST": roles,
    }


def job_env_values(config: JobConfig) -> dict[str, str]:
    """jobEnvs as text, less ``NVIDIA_VISIBLE_DEVICES`` (a job does not choose its own GPUs)."""
    return {k: env_value(v) for k, v in config.job_envs.items() if k != NVIDIA_VISIBLE_DEVICES}


def build_task_env(config: JobConfig, plan: Plan, *, user: str, role: TaskRole, index: int,
                   paths: JobPaths, container_id: str, app: str = "", attempt: int = 0) -> dict[str, str]:
    """One task's whole environment (O(tasks of the job)); for many tasks build :func:`job_environment` once."""
    env = job_environment(config, plan, user=user, paths=paths, app=app, attempt=attempt)
    return env.task_env(role, index, container_id)


def task_variables(role: TaskRole, index: int, me: TaskPlacement, container_id: str) -> dict[str, str]:
    """What is particular to one task (jobEnvs and GPUs aside), under every name v0.14's container
    script gave it."""
    name, count, i = role.name, str(role.task_number), str(index)
    cpus, memory, gpus = str(role.cpu_number), str(role.memory_mb), str(role.gpu_number)
    http, ssh = _first(me.ports, "http"), _first(me.ports, "ssh")
    env = {
        "PAI_CURRENT_TASK_ROLE_NAME": name,
        "PAI_TASK_ROLE_NAME": name,
        "PAI_CURRENT_TASK_ROLE_TASK_COUNT": count,
        "PAI_TASK_ROLE_NUM": count,
        "PAI_CURRENT_TASK_ROLE_CPU_COUNT": cpus,
        "PAI_TASK_CPU_NUM": cpus,
        "PAI_CURRENT_TASK_ROLE_MEM_MB": memory,
        "PAI_TASK_MEM_MB": memory,
        "PAI_CURRENT_TASK_ROLE_SHM_MB": str(role.shm_mb),
        "PAI_CURRENT_TASK_ROLE_GPU_COUNT": gpus,
        "PAI_TASK_GPU_NUM": gpus,
        "PAI_RESOURCE": resource(role),
        "PAI_CURRENT_TASK_ROLE_MIN_FAILED_TASK_COUNT": _count(role.min_failed_task_count),
        "PAI_CURRENT_TASK_ROLE_MIN_SUCCEEDED_TASK_COUNT": _count(role.min_succeeded_task_count),
        "PAI_CURRENT_TASK_ROLE_CURRENT_TASK_INDEX": i,
        "PAI_TASK_INDEX": i,
        "PAI_TASK_ROLE_INDEX": i,
        "PAI_CONTAINER_ID": container_id,
        "PAI_CONTAINER_HOST_IP": me.ip,
        "PAI_CURRENT_CONTAINER_IP": me.ip,
        "PAI_CONTAINER_HOST_PORT_LIST": _port_list(me.ports),
        "PAI_CONTAINER_HOST_PORT": http,
        "PAI_CURRENT_CONTAINER_PORT": http,
        "PAI_CONTAINER_SSH_PORT": ssh,
    }
    for label, ports in me.ports.items():
        env[f"PAI_CONTAINER_HOST_{env_name(label)}_PORT_LIST"] = ",".join(map(str, ports))
    return env


def resource(role: TaskRole) -> str:
    """``gpuNumber,cpuNumber,memoryMB,shmMB``."""
    return f"{role.gpu_number},{role.cpu_number},{role.memory_mb},{role.shm_mb}"


def role_figures(role: TaskRole) -> dict[str, str]:
    """A role's size and resources, as every task sees them."""
    r = env_name(role.name)
    return {
        f"PAI_TASK_ROLE_TASK_COUNT_{r}": str(role.task_number),
        f"PAI_RESOURCE_{r}": resource(role),
        f"PAI_MIN_FAILED_TASK_COUNT_{r}": _count(role.min_failed_task_count),
        f"PAI_MIN_SUCCEEDED_TASK_COUNT_{r}": _count(role.min_succeeded_task_count),
    }


# The names of the variables about each task of a role, every task sees them all (shared.admission.envsize sizes
# them with ``index=""``): its host, its ports per label (under two names), and the role's host list.
def host_ip_name(r: str, index: str) -> str:
    return f"PAI_HOST_IP_{r}_{index}"


def port_names(r: str, index: str, label: str) -> tuple[str, str]:
    return f"PAI_PORT_LIST_{r}_{index}_{label}", f"PAI_{r}_{index}_{label}_PORT"


def host_list_name(r: str) -> str:
    return f"PAI_TASK_ROLE_{r}_HOST_LIST"


def _role_env(role: TaskRole, plan: Plan) -> dict[str, str]:
    """The variables every task sees about one role (its size, resources, hosts and ports)."""
    return {**role_figures(role), **peer_tables(role, plan, env_name(role.name))}


def peer_tables(role: TaskRole, plan: Plan, r: str) -> dict[str, str]:
    """Every task's host and ports, and the role's host list, with the role spelt ``r`` in the names."""
    env: dict[str, str] = {}
    hosts: list[str] = []
    for i in range(role.task_number):
        t = plan.for_task(role.name, i)
        http = _first(t.ports, "http")
        hosts.append(f"{t.ip}:{http}" if http else t.ip)
        env[host_ip_name(r, str(i))] = t.ip
        for label, ports in t.ports.items():
            joined = ",".join(map(str, ports))
            for name in port_names(r, str(i), env_name(label)):
                env[name] = joined
    env[host_list_name(r)] = ",".join(hosts)
    return env
