"""The variables OpenPAI v1.x gave a task, for protocol v2 jobs, on top of v0.14's (:mod:`shared.tasks.envvars`).

Three programs made them in v1.x (microsoft/pai@v1.8.0 and openpai-runtime@59ec6d17): rest-server
``models/v2/job/runtime-env.js`` (the job's), ``k8s.js generateTaskRole`` (the task's role and index),
the runtime's ``init.d/framework_parser.py`` (hosts and ports, sourced before the user's commands), and
frameworkcontroller put its ``FC_*`` annotations into every container. paiq gives a v2 job's task every
v0.14 variable and these; where both generations have a name, v1.x's value wins for a v2 job.

**Role names.** A v2 role name is ``^[a-zA-Z_][a-zA-Z0-9_]*$``, usable in a variable name as written
(``<r>``). OpenPAI's framework knew the role as ``convertName(<r>)`` (``<c>``: lowercased, every
character but ``[a-z0-9]`` removed; ``Worker_A`` -> ``workera``), and the runtime's variables (hosts,
ports, host lists, ``PAI_TASK_ROLE_INSTANCES``, ``FC_TASKROLE_NAME``) used ``<c>``; rest-server's
(``PAI_TASK_ROLE_TASK_COUNT_<r>``, ``PAI_RESOURCE_<r>``, ``PAI_MIN_*_<r>``, ``PAI_CURRENT_TASK_ROLE_NAME``)
used ``<r>``. paiq gives the runtime's per-task variables under ``<c>`` as OpenPAI did **and** under
``<r>`` (v0.14's spelling, and the docs' ``PAI_PORT_LIST_${PAI_CURRENT_TASK_ROLE_NAME}_...`` recipe),
once where the two are the same. Two roles of one ``<c>`` (``a_b`` and ``ab``, ``Worker`` and
``worker``) would share those variables (in OpenPAI they collided in the framework): refused at submit
(:func:`colliding_roles`).

=====================================================  ===================================================
name (example: alice's job j1, roles ps x1, worker x2)  value
=====================================================  ===================================================
``PAI_FRAMEWORK_NAME``, ``PAI_JOB_NAME``               ``alice~j1`` (v1.x's code; v0.14 and v1 jobs: ``j1``)
``PAI_VIRTUAL_CLUSTER``                                the job's virtual cluster
``PAI_TASK_ROLE_INSTANCES``                            ``ps:0,worker:0,worker:1`` (``<c>:<i>``, every task)
``PAI_MIN_FAILED_TASK_COUNT_<r>``,                     as v0.14's, but a count that never triggers (v2's -1,
``PAI_MIN_SUCCEEDED_TASK_COUNT_<r>``                   or more than ``instances``) is ``-1``, not empty
``PAI_HOST_IP_<c>_<i>``, ``PAI_PORT_LIST_<c>_<i>_<l>``,  v0.14's values under the ``<c>`` spelling too
``PAI_<c>_<i>_<l>_PORT``, ``PAI_TASK_ROLE_<c>_HOST_LIST``
``PAI_CONTAINER_HOST_PORT_LIST``                       ``http:20003;ssh:20004;`` (the runtime's trailing ``;``)
``FC_FRAMEWORK_NAME``                                  md5 of ``alice~j1`` in hex (rest-server's ``encodeName``)
``FC_FRAMEWORK_ATTEMPT_ID``                            the job's attempt, from 0
``FC_TASKROLE_NAME``, ``FC_TASK_INDEX``                ``<c>``, the task's index
``FC_POD_NAME``                                        ``<FC_FRAMEWORK_NAME>-<c>-<i>`` (frameworkcontroller's)
``FC_TASK_ATTEMPT_ID``                                 the task's run in its job's attempt, from 0 (taskRetryCount)
=====================================================  ===================================================

Left out, naming Kubernetes objects paiq has none of: ``FC_FRAMEWORK_NAMESPACE``, ``FC_CONFIGMAP_NAME``
and every ``FC_*_UID``; and the runtime's internal ``RUNTIME_LOG_PIPE``. ``PAI_RESOURCE_<r>`` keeps the
shm the task really gets (v1.x wrote 0 when ``shmMB`` was unset, though its tasks got 512).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping

from shared.jobconfig.model import JobConfig, TaskRole, env_name
from shared.scheduling.placement import TaskPlacement

NEVER = "-1"  # frameworkcontroller's "never a trigger": what a v2 job wrote for such a count


def speaks_v1x(config: JobConfig) -> bool:
    """Whether the job came in protocol v2 (and its tasks get v1.x's variables): its mapping names every
    role's image (shared.admission.v2.tojob), which a v1 body never sets (an internal field)."""
    return all(role.image for role in config.task_roles)


def framework_role_name(name: str) -> str:
    """OpenPAI v1.x's ``convertName``: the role as its framework (and the runtime's variables) knew it."""
    return re.sub(r"[^a-z0-9]", "", name.lower())


def colliding_roles(names: list[str]) -> list[tuple[str, str]]:
    """Pairs of roles (the first of each spelling, then the other) whose framework names are one."""
    first: dict[str, str] = {}
    pairs = []
    for name in names:
        c = framework_role_name(name)
        if c in first:
            pairs.append((first[c], name))
        else:
            first[c] = name
    return pairs


def framework_name(user: str, job_name: str) -> str:
    return f"{user}~{job_name}"


def fc_framework_name(user: str, job_name: str) -> str:
    """rest-server's ``encodeName``: a job's framework was named by the md5 of ``user~name``."""
    return hashlib.md5(framework_name(user, job_name).encode(), usedforsecurity=False).hexdigest()


def _count(value: int | None) -> str:
    return NEVER if value is None else str(value)


def instances_entry(role: TaskRole, index: int) -> str:
    return f"{framework_role_name(role.name)}:{index}"


def job_variables(config: JobConfig, *, user: str, attempt: int) -> dict[str, str]:
    """The job's own v1.x variables (over v0.14's of the same name); each role's are
    :func:`role_figures`, the list of every task :func:`task_role_instances`, and the peers' tables
    under ``<c>`` :func:`shared.tasks.envvars.peer_tables` with :func:`framework_role_name`."""
    name = framework_name(user, config.job_name)
    return {
        "PAI_FRAMEWORK_NAME": name,
        "PAI_JOB_NAME": name,
        "PAI_VIRTUAL_CLUSTER": config.virtual_cluster,
        "FC_FRAMEWORK_NAME": fc_framework_name(user, config.job_name),
        "FC_FRAMEWORK_ATTEMPT_ID": str(attempt),
    }


INSTANCES = "PAI_TASK_ROLE_INSTANCES"


def task_role_instances(config: JobConfig) -> dict[str, str]:
    """``PAI_TASK_ROLE_INSTANCES``: every task as ``<c>:<i>``, roles in order (O(tasks))."""
    return {INSTANCES: ",".join(instances_entry(role, i) for role in config.task_roles
                                for i in range(role.task_number))}


def role_figures(role: TaskRole) -> dict[str, str]:
    """A role's v1.x figures where they differ from v0.14's (a count that never triggers)."""
    r = env_name(role.name)
    return {f"PAI_MIN_FAILED_TASK_COUNT_{r}": _count(role.min_failed_task_count),
            f"PAI_MIN_SUCCEEDED_TASK_COUNT_{r}": _count(role.min_succeeded_task_count)}


def port_list(ports: Mapping[str, tuple[int, ...]]) -> str:
    """The runtime's ``PAI_CONTAINER_HOST_PORT_LIST``: ``label:p1,p2;`` for each label, ``;`` after each."""
    return "".join(f"{label}:{','.join(map(str, ps))};" for label, ps in ports.items())


def task_variables(role: TaskRole, me: TaskPlacement, *, fc_name: str, task_attempt: int = 0) -> dict[str, str]:
    """One task's own v1.x variables (over v0.14's of the same name)."""
    c = framework_role_name(role.name)
    return {
        "PAI_CONTAINER_HOST_PORT_LIST": port_list(me.ports),
        "FC_TASKROLE_NAME": c,
        "FC_TASK_INDEX": str(me.index),
        "FC_POD_NAME": f"{fc_name}-{c}-{me.index}",
        "FC_TASK_ATTEMPT_ID": str(task_attempt),
    }
