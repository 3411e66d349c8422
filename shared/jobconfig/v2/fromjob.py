"""A job's config as a protocol v2 document, for ``GET /api/v2/jobs/{user}~{name}/config`` of a v1 job.

A v2 job is shown from its stored (masked) document; a v1 job is converted here, the way OpenPAI's
v1.x portal and rest-server spelled a v1 job in v2: one ``dockerimage`` prerequisite per image
(``docker_image_0``, ``docker_image_1``, ... as the portal named them), each role's command as its one
``commands`` item, the counts and resources field by field. Submitting the result again runs the same
job (tests/unit/test_protocol_v2_mapping.py), with the gaps below.

Mapping gaps (v1 fields v2 cannot say):

- ``jobEnvs``: v2 has no environment section; each variable becomes an ``export NAME=value`` line
  before every role's command, so the commands see them (paiq's own uses of ``isDebug`` and
  ``PAI_SSH_PUB_KEY`` read them from ``jobEnvs``, which a resubmitted job does not have);
- ``retryCount`` -1 and -2 (v2's ``jobRetryCount`` is >= 0): left out (0 once resubmitted);
- ``authFile``, ``dataDir``, ``outputDir``, ``codeDir`` (and their ``PAI_*_DIR`` variables): dropped;
- ``gpuType``: written as every role's ``extras.hivedScheduler.taskRoles.<role>.skuType``;
- role names and port labels with ``.``, ``~`` or a leading digit (v1 allows them, v2's keys do not):
  kept as they are, so the document shows them but is refused if submitted as v2;
- a command holding ``<%`` is rendered if submitted as v2.
"""

from __future__ import annotations

import shlex
from typing import Any

from shared.jobconfig.model import JobConfig, TaskRole, env_value
from shared.jobconfig.v2.model import NEVER


def _completion(value: int | None) -> int:
    return NEVER if value is None else value


def _exports(config: JobConfig) -> str:
    return "".join(f"export {name}={shlex.quote(env_value(value))}\n" for name, value in config.job_envs.items())


def _role(config: JobConfig, role: TaskRole, image_name: str) -> dict[str, Any]:
    resources: dict[str, Any] = {"cpu": role.cpu_number, "memoryMB": role.memory_mb, "gpu": role.gpu_number}
    if role.port_list:
        resources["ports"] = {p.label: p.port_number for p in role.port_list}
    return {
        "instances": role.task_number,
        "completion": {"minFailedInstances": _completion(role.min_failed_task_count),
                       "minSucceededInstances": _completion(role.min_succeeded_task_count)},
        **({"taskRetryCount": role.task_retry_count} if role.task_retry_count is not None else {}),
        "dockerImage": image_name,
        "resourcePerInstance": resources,
        "extraContainerOptions": {"shmMB": role.shm_mb},
        "commands": [_exports(config) + role.command],
    }


def to_v2_document(config: JobConfig) -> dict[str, Any]:
    """``config`` as a v2 document (YAML-able: plain dicts, lists, strings and numbers). Secrets and
    registry credentials are never written."""
    images: dict[str, str] = {}
    for role in config.task_roles:
        images.setdefault(config.image_of(role), f"docker_image_{len(images)}")
    extras: dict[str, Any] = dict(config.extras)
    if config.gpu_type:
        hived = dict(extras.get("hivedScheduler") or {})
        hived["taskRoles"] = {**(hived.get("taskRoles") or {}),
                              **{r.name: {"skuType": config.gpu_type} for r in config.task_roles}}
        extras["hivedScheduler"] = hived
    document: dict[str, Any] = {
        "protocolVersion": 2,
        "name": config.job_name,
        "type": "job",
        "prerequisites": [{"name": name, "type": "dockerimage", "uri": uri} for uri, name in images.items()],
    }
    if config.retry_count >= 0:
        document["jobRetryCount"] = config.retry_count
    document["taskRoles"] = {r.name: _role(config, r, images[config.image_of(r)]) for r in config.task_roles}
    document["defaults"] = {"virtualCluster": config.virtual_cluster}
    if extras:
        document["extras"] = extras
    return document
