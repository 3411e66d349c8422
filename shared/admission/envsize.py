"""Whether every task's environment fits what Linux lets a process start with, from the config alone.

Docker hands a container's environment to its first process through exec, and Linux refuses exec
(E2BIG) when one ``NAME=value`` string passes ``MAX_ARG_STRLEN`` (128 KiB, its NUL included) or when the
environment and the arguments together pass a quarter of the stack limit (2 MiB with the usual 8 MiB),
each string counted with its NUL and a pointer. paiq keeps one task's environment within a budget of
1 MiB (the rest for the command, the image's own variables and a smaller stack), and refuses at submit
a job that could pass either limit: every task sees every task's host and ports, so the environment
grows with the job.

The estimate is a worst case computed without a placement: IPv4 addresses of 15 characters, ports of
5 digits, GPU indices of 2, the longest container name; the real role names, port labels, task and
port counts, paths and jobEnvs. The fixed variables are made by :mod:`shared.tasks.envvars` itself; the
per-task tables (O(tasks)) are sized arithmetically from the same names, so a job of any size is
judged in O(roles x labels).

A protocol v2 job's tasks also get OpenPAI v1.x's variables (:mod:`shared.tasks.runtimeenv`): they are
counted too, among them ``PAI_TASK_ROLE_INSTANCES`` (one string naming every task, so it meets
``MAX_ARG_STRLEN`` first in a big job of long role names) and each role's hosts and ports a second
time where its framework name is spelt otherwise. A v1 job is judged as before.
"""

from __future__ import annotations

from collections.abc import Mapping

from pydantic import BaseModel, ConfigDict

from shared.admission.validation import ConfigProblem
from shared.jobconfig.limits import MAX_ARG_STRLEN  # one "NAME=value" string, its NUL included (Linux: 32 pages)
from shared.jobconfig.limits import digits_below as digits_below
from shared.jobconfig.model import JobConfig, TaskRole, env_name
from shared.records import job_id_of
from shared.scheduling.placement import TaskPlacement
from shared.tasks import runtimeenv
from shared.tasks.envvars import (
    JobPaths,
    app_id,
    gpu_variables,
    host_ip_name,
    host_list_name,
    job_env_values,
    job_variables,
    port_names,
    role_figures,
    task_variables,
)

ENV_BUDGET = 1024 * 1024  # one task's whole environment, as exec counts it
POINTER = 8  # exec also counts a pointer per string
WORST_IP = "255.255.255.255"
WORST_PORT = 65535
WORST_GPU = 99
CONTAINER_NAME_MAX = len("paiq-") + 120 + len("-") + 8  # shared.tasks.launchspec.container_name
WORST_ATTEMPT = 10**10 - 1  # retryCount -2 retries without end


class StringSize(BaseModel):
    """One variable at its largest: ``NAME=value`` with its NUL, and the config field it grows with."""

    model_config = ConfigDict(frozen=True)
    path: str
    size: int
    hint: str = ""


class EnvEstimate(BaseModel):
    """Worst-case bytes of one task's environment as exec counts them (strings with NULs, pointers)."""

    model_config = ConfigDict(frozen=True)
    total: int  # the largest task's whole environment
    roles: dict[str, int]  # per role: what every task spends on that role (its figures, hosts and ports)
    job_envs: int
    strings: dict[str, StringSize]  # every variable's largest string, by name


def string_bytes(name: str, value: str) -> int:
    """``NAME=value`` and its NUL."""
    return len(name.encode()) + 1 + len(value.encode()) + 1


def _sized(env: Mapping[str, str]) -> int:
    return sum(string_bytes(k, v) + POINTER for k, v in env.items())


FC_NAME = "f" * 32  # an md5 in hex (shared.tasks.runtimeenv.fc_framework_name)


def _own(role: TaskRole, v1x: bool) -> dict[str, str]:
    """A task's own variables at their largest (its role's last index, worst host, ports and GPUs)."""
    me = TaskPlacement(role=role.name, index=role.task_number - 1, node_id="", ip=WORST_IP,
                       gpus=(WORST_GPU,) * role.gpu_number,
                       ports={p.label: (WORST_PORT,) * p.port_number for p in role.ports})
    env = task_variables(role, me.index, me, "c" * CONTAINER_NAME_MAX)
    if v1x:
        env.update(runtimeenv.task_variables(role, me, fc_name=FC_NAME))
    env.update(gpu_variables(me.gpus))
    return env


def worst_app_id(config: JobConfig, user: str) -> str:
    """``APP_ID`` at its longest: an id of :func:`shared.records.new_job_id`, a 10-digit attempt."""
    return app_id(f"{job_id_of(user, config.job_name)}~{'f' * 8}", WORST_ATTEMPT)


def _host_entry(role: TaskRole) -> int:
    """One task's part of its role's host list: ``ip:port`` (its http port), and a comma."""
    return len(WORST_IP) + 1 + len(str(WORST_PORT)) + 1


def _peer_tables(role: TaskRole, r: str) -> tuple[int, int]:
    """Bytes every task spends on one role's per-task variables (the role spelt ``r`` in their names),
    and the role's host list string."""
    n = role.task_number
    per_task = string_bytes(host_ip_name(r, ""), WORST_IP) + POINTER
    for port in role.ports:
        value = port.port_number * (len(str(WORST_PORT)) + 1) - 1
        per_task += sum(string_bytes(name, "") + value + POINTER for name in port_names(r, "", env_name(port.label)))
    index_digits = (1 + 2 * len(role.ports)) * digits_below(n)  # each index, in each of those names
    host_list = string_bytes(host_list_name(r), "") + n * _host_entry(role) - 1
    return n * per_task + index_digits + host_list + POINTER, host_list


_PATH_OF = {"PAI_DATA_DIR": "dataDir", "PAI_OUTPUT_DIR": "outputDir", "PAI_CODE_DIR": "codeDir"}


def estimate(config: JobConfig, *, user: str, paths: JobPaths) -> EnvEstimate:
    """One task's environment at its largest, and every variable's largest string."""
    strings: dict[str, StringSize] = {}

    def note(path: str, env: Mapping[str, str]) -> None:
        for k, v in env.items():
            size = string_bytes(k, v)
            if k not in strings or size > strings[k].size:
                strings[k] = StringSize(path=_PATH_OF.get(k, path), size=size)

    v1x = runtimeenv.speaks_v1x(config)
    job = job_variables(config, user=user, paths=paths, app=worst_app_id(config, user))
    if v1x:
        job.update(runtimeenv.job_variables(config, user=user, attempt=WORST_ATTEMPT))
    envs = job_env_values(config)
    note("(job)", job)
    for k, v in envs.items():
        note(f"jobEnvs.{k}", {k: v})
    roles: dict[str, int] = {}
    own = 0
    for i, role in enumerate(config.task_roles):
        figures, mine = role_figures(role), _own(role, v1x)
        if v1x:
            figures.update(runtimeenv.role_figures(role))
        note(f"taskRoles[{i}]", figures)
        note(f"taskRoles[{i}].portList", mine)
        roles[role.name] = _sized(figures)
        r = env_name(role.name)
        spellings = [r] + ([c] if v1x and (c := runtimeenv.framework_role_name(role.name)) != r else [])
        for spelt in spellings:
            tables, host_list = _peer_tables(role, spelt)
            name = host_list_name(spelt)
            fits = (MAX_ARG_STRLEN - string_bytes(name, "") + 1) // _host_entry(role)
            strings[name] = StringSize(path=f"taskRoles[{i}].taskNumber", size=host_list,
                                       hint=f"; a role of at most {fits:,} tasks fits")
            roles[role.name] += tables
        own = max(own, _sized(mine))
    total = _sized(job) + _sized(envs) + sum(roles.values()) + own
    if v1x:
        strings[runtimeenv.INSTANCES] = _instances(config)
        total += strings[runtimeenv.INSTANCES].size + POINTER
    return EnvEstimate(total=total, roles=roles, job_envs=_sized(envs), strings=strings)


def _instances(config: JobConfig) -> StringSize:
    """``PAI_TASK_ROLE_INSTANCES`` (``<c>:<i>`` for every task, comma-separated), sized arithmetically."""
    entries = sum(role.task_number * (len(runtimeenv.framework_role_name(role.name)) + 2)
                  + digits_below(role.task_number) for role in config.task_roles)
    return StringSize(path="taskRoles", size=string_bytes(runtimeenv.INSTANCES, "") + entries - 1, hint=(
        f"; it names every task as <role>:<index> ({config.total_tasks:,} tasks): fewer tasks or shorter "
        f"role names fit"))


def env_size_problems(config: JobConfig, *, user: str, paths: JobPaths) -> list[ConfigProblem]:
    """What would make Linux refuse to start a task of this job (nothing: it fits)."""
    est = estimate(config, user=user, paths=paths)
    problems = [
        ConfigProblem(path=s.path, rule=(
            f"variable {name} would be up to {s.size:,} bytes; Linux refuses to start a process with a variable "
            f"over {MAX_ARG_STRLEN:,} bytes (MAX_ARG_STRLEN, 128 KiB){s.hint}"))
        for name, s in est.strings.items() if s.size > MAX_ARG_STRLEN
    ]
    if est.total > ENV_BUDGET:
        heavy = sorted(est.roles.items(), key=lambda kv: -kv[1])[:3]
        parts = [f"role {name} ({config.role(name).task_number:,} tasks) {size:,}" for name, size in heavy]
        if est.job_envs > ENV_BUDGET // 10:
            parts.append(f"jobEnvs {est.job_envs:,}")
        problems.append(ConfigProblem(path="taskRoles", rule=(
            f"one task's environment would be up to {est.total:,} bytes, over paiq's budget of {ENV_BUDGET:,} "
            f"(1 MiB; Linux refuses to start a process whose environment and arguments pass a quarter of its "
            f"stack limit, 2 MiB with the usual 8 MiB); every task sees every task's host and ports, of which "
            f"{'; '.join(parts)}")))
    return problems
