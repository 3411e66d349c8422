"""A protocol v2 job as paiq's one internal :class:`~shared.jobconfig.model.JobConfig`, run unchanged.

=========================================  =================================================================
v2                                         JobConfig
=========================================  =================================================================
``name``                                   ``jobName``
``defaults.virtualCluster``                ``virtualCluster`` (``default`` when absent)
``jobRetryCount``                          ``retryCount``
role key                                   ``taskRoles[].name`` (in the document's order)
``instances``                              ``taskNumber`` (1 when absent)
``resourcePerInstance.cpu/memoryMB/gpu``   ``cpuNumber`` / ``memoryMB`` / ``gpuNumber``
``resourcePerInstance.ports`` by label     ``portList`` (``beginAt`` 0: paiq picks; ``http``/``ssh`` added)
``extraContainerOptions.shmMB``            ``shmMB``; v2's 512 when absent (at most ``memoryMB``)
``completion.minFailedInstances``          ``minFailedTaskCount``: absent/null/0 -> 1 (OpenPAI's), -1 or
                                           more than ``instances`` -> null (never a trigger)
``completion.minSucceededInstances``       ``minSucceededTaskCount``: absent/null/0 -> ``instances``
                                           (OpenPAI's: the role's tasks all succeeded end the job), -1 or
                                           more than ``instances`` -> null (the job ends with its tasks)
pre + ``commands`` + post, rendered        ``command`` (``$secrets`` still to render, at task start)
``dockerImage`` -> its prerequisite        the role's internal ``image``; the job's ``image`` is the first
                                           role's
the prerequisite's ``auth``, rendered      ``registryAuth`` (internal, per role and the job's)
``taskRetryCount``                         the role's internal ``taskRetryCount`` (when written)
``parameters``, ``secrets``                internal ``parameters``, ``secrets``
``extras`` (``hivedScheduler``             ``extras`` as written (the priority class read from it);
``.jobPriorityClass`` and all)             ``hivedScheduler.taskRoles.<r>.skuType``, one for every role ->
                                           ``gpuType``
=========================================  =================================================================

Runtime plugins declared as prerequisites (``plugin: com.microsoft.pai.runtimeplugin.<name>``) join the
front of ``extras["com.microsoft.pai.runtimeplugin"]`` for the roles naming them, and a tensorboard plugin
reserves a ``tensorboard`` port on the first role (:mod:`shared.tasks.plugins`).

The stored config is the document with ``secrets`` masked (and timestamps as JSON strings): what
``GET .../config`` shows back. Problems of the mapped job are named by their v2 path. Two roles that
OpenPAI v1.x's framework would have named alike (``a_b`` and ``ab``, ``Worker`` and ``worker``) are
refused: their tasks' variables would collide (:mod:`shared.tasks.runtimeenv`).
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from shared.admission.validation import Accepted, Rejected, config_problems, limit_problems
from shared.jobconfig.limits import JobLimits
from shared.jobconfig.model import IMAGE_PATTERN, JobConfig
from shared.jobconfig.problems import ConfigProblem, problems_from
from shared.jobconfig.v2.jsvalues import js_iso
from shared.jobconfig.v2.model import NEVER, JobV2
from shared.jobconfig.v2.model import TaskRole as RoleV2
from shared.jobconfig.v2.render import RenderError, masked, render_auth, role_command
from shared.tasks.plugins import TENSORBOARD_PORT, plugin_warnings, uses_plugin, with_prerequisite_plugins
from shared.tasks.runtimeenv import colliding_roles, framework_role_name

DEFAULT_SHM_MB = 512  # v2's /dev/shm when extraContainerOptions.shmMB is absent (models/v2/job/k8s.js)
AUTH_KEYS = ("username", "password", "registryuri")  # what a registry login takes; other keys are kept only

# A v1 path's role field -> the v2 field it came from.
_ROLE_FIELDS = {"taskNumber": "instances", "cpuNumber": "resourcePerInstance.cpu",
                "memoryMB": "resourcePerInstance.memoryMB", "gpuNumber": "resourcePerInstance.gpu",
                "shmMB": "extraContainerOptions.shmMB", "command": "commands",
                "minFailedTaskCount": "completion.minFailedInstances",
                "minSucceededTaskCount": "completion.minSucceededInstances", "image": "dockerImage",
                "taskRetryCount": "taskRetryCount", "name": ""}
_TOP_FIELDS = {"jobName": "name", "virtualCluster": "defaults.virtualCluster", "retryCount": "jobRetryCount",
               "gpuType": "extras.hivedScheduler.taskRoles", "taskRoles": "taskRoles"}
_ROLE_PATH = re.compile(r"^taskRoles\[(\d+)\](?:\.([A-Za-z]+))?(?:\[(\d+)\])?(.*)$")


def _completion(value: int | None, instances: int, falsy: int) -> int | None:
    if not value:
        return falsy
    if value == NEVER or value > instances:
        return None
    return value


def _prerequisite(document: Mapping[str, Any], kind: str, name: str) -> Any:
    """The raw prerequisite of ``kind`` named ``name`` (its every key, for ``$script.uri`` and the like)."""
    for item in document.get("prerequisites") or ():
        if isinstance(item, Mapping) and item.get("type") == kind and item.get("name") == name:
            return item
    return None


def _sku_type(extras: Mapping[str, Any], roles: list[str]) -> str:
    hived = extras.get("hivedScheduler")
    per_role = hived.get("taskRoles") if isinstance(hived, Mapping) else None
    if not isinstance(per_role, Mapping):
        return ""
    skus = {str(r.get("skuType")) for name in roles if isinstance(r := per_role.get(name), Mapping) and
            isinstance(r.get("skuType"), str)}
    return skus.pop() if len(skus) == 1 and all(name in per_role for name in roles) else ""


def _role(name: str, role: RoleV2, command: str, image: str, auth: dict[str, str] | None) -> dict[str, Any]:
    resources = role.resource_per_instance
    options = role.extra_container_options
    shm = options.shm_mb if "shm_mb" in options.model_fields_set else max(1, min(DEFAULT_SHM_MB, resources.memory_mb))
    out: dict[str, Any] = {
        "name": name, "taskNumber": role.instances, "cpuNumber": resources.cpu, "memoryMB": resources.memory_mb,
        "gpuNumber": resources.gpu, "shmMB": shm, "command": command, "image": image,
        "portList": [{"label": label, "beginAt": 0, "portNumber": n} for label, n in (resources.ports or {}).items()],
        "minFailedTaskCount": _completion(role.completion.min_failed_instances, role.instances, 1),
        "minSucceededTaskCount": _completion(role.completion.min_succeeded_instances, role.instances,
                                             role.instances),
    }
    if auth is not None:
        out["registryAuth"] = auth
    if "task_retry_count" in role.model_fields_set:
        out["taskRetryCount"] = role.task_retry_count
    return out


def _commands(job: JobV2, document: Mapping[str, Any], at_most: int) -> dict[str, str] | list[ConfigProblem]:
    """Each role's command, rendered as OpenPAI's rest-server did (its mustache errors as problems)."""
    deployment = next((d for d in job.deployments if d.name == job.defaults.deployment), None) \
        if "deployment" in job.defaults.model_fields_set else None
    out: dict[str, str] = {}
    problems = []
    for name, role in job.task_roles.items():
        steps = deployment.task_roles.get(name) if deployment is not None else None
        view = {"$parameters": document.get("parameters"),
                "$script": _prerequisite(document, "script", role.script),
                "$output": _prerequisite(document, "output", role.output),
                "$data": _prerequisite(document, "data", role.data)}
        try:
            out[name] = role_command(role.commands, steps.pre_commands if steps else [],
                                     steps.post_commands if steps else [], view, at_most)
        except RenderError as e:
            problems.append(ConfigProblem(path=f"taskRoles.{name}.commands", rule=f"cannot be rendered: {e}"))
    return problems or out


def _auths(document: Mapping[str, Any]) -> dict[str, dict[str, str]] | list[ConfigProblem]:
    """Each dockerimage's ``auth`` with ``$secrets`` rendered, by the prerequisite's name."""
    secrets = document.get("secrets")
    out: dict[str, dict[str, str]] = {}
    problems = []
    for i, item in enumerate(document.get("prerequisites") or ()):
        if isinstance(item, Mapping) and item.get("type") == "dockerimage" and isinstance(item.get("auth"), Mapping):
            try:
                rendered = render_auth(item["auth"], secrets if isinstance(secrets, Mapping) else {})
                out[item["name"]] = {k: rendered[k] for k in AUTH_KEYS if k in rendered}
            except RenderError as e:
                problems.append(ConfigProblem(path=f"prerequisites[{i}].auth", rule=f"cannot be rendered: {e}"))
    return problems or out


def v1_fields(job: JobV2, document: Mapping[str, Any], commands: dict[str, str],
              auths: dict[str, dict[str, str]]) -> dict[str, Any]:
    """The job in the v1 JobConfig's spelling (aliases), internal fields included."""
    images = {item.name: item.uri for item in job.prerequisites if item.type == "dockerimage"}
    roles = [_role(name, role, commands[name], images[role.docker_image], auths.get(role.docker_image))
             for name, role in job.task_roles.items()]
    first = roles[0]
    extras = with_prerequisite_plugins(job.extras, document)
    if uses_plugin(extras, "tensorboard") and all(p["label"] != TENSORBOARD_PORT for p in first["portList"]):
        # the tensorboard runtime plugin's server: a port reserved on the first role (its first task serves)
        first["portList"].append({"label": TENSORBOARD_PORT, "beginAt": 0, "portNumber": 1})
    defaults = job.defaults.model_extra or {}
    out: dict[str, Any] = {
        "jobName": job.name, "image": first["image"], "retryCount": job.job_retry_count, "taskRoles": roles,
        "extras": extras, "parameters": job.parameters, "secrets": job.secrets,
        "gpuType": _sku_type(job.extras, list(job.task_roles)),
    }
    if "virtualCluster" in defaults:
        out["virtualCluster"] = defaults["virtualCluster"]
    if "registryAuth" in first:
        out["registryAuth"] = first["registryAuth"]
    return out


def v2_path(path: str, roles: list[str], labels: list[list[str]] | None = None) -> str:
    """A problem's v1 path (``taskRoles[1].cpuNumber``) as the v2 document's
    (``taskRoles.worker.resourcePerInstance.cpu``)."""
    if path == "image" and roles:  # the job's image is its first role's
        return f"taskRoles.{roles[0]}.dockerImage"
    matched = _ROLE_PATH.match(path)
    if matched is None:
        head, dot, rest = path.partition(".")
        return _TOP_FIELDS.get(head, head) + (dot + rest if head not in _TOP_FIELDS or head == "extras" else "")
    index, field, item, rest = matched.groups()
    name = roles[int(index)] if int(index) < len(roles) else index
    at = f"taskRoles.{name}"
    if field is None:
        return at
    if field == "portList":
        known = labels[int(index)] if labels is not None and int(index) < len(labels) else []
        label = f".{known[int(item)]}" if item is not None and int(item) < len(known) else ""
        return f"{at}.resourcePerInstance.ports{label}"
    mapped = _ROLE_FIELDS.get(field, field)
    return f"{at}.{mapped}" if mapped else at


def _translated(problems: list[ConfigProblem], fields: Mapping[str, Any]) -> list[ConfigProblem]:
    roles = [r["name"] for r in fields["taskRoles"]]
    labels = [[p["label"] for p in r["portList"]] for r in fields["taskRoles"]]
    return [ConfigProblem(path=v2_path(p.path, roles, labels),
                          rule=p.rule.replace("taskNumber", "instances").replace("portNumber", "the port count"))
            for p in problems]


def spelling_problems(config: JobConfig) -> list[ConfigProblem]:
    """Two roles whose framework names (OpenPAI v1.x's spelling in its tasks' variables) are one."""
    index = {role.name: i for i, role in enumerate(config.task_roles)}
    return [ConfigProblem(path=f"taskRoles[{index[other]}]", rule=(
        f"must not read as role {first}'s name once lowercased and stripped of '_' "
        f"({framework_role_name(other)!r}): OpenPAI v1.x spelt a role that way in its tasks' variables "
        f"(PAI_HOST_IP_<role>_<index>, PAI_TASK_ROLE_INSTANCES, ...), so both would share them"))
        for first, other in colliding_roles([role.name for role in config.task_roles])]


def stored(value: Any) -> Any:
    """A decoded YAML value as JSON can hold it: timestamps as JSON.stringify wrote js-yaml's Dates."""
    if isinstance(value, Mapping):
        return {k: stored(v) for k, v in value.items()}
    if isinstance(value, list):
        return [stored(v) for v in value]
    if isinstance(value, dt.date):
        return js_iso(value)
    return value


def to_job_config(job: JobV2, document: Mapping[str, Any], limits: JobLimits) -> Accepted | Rejected:
    """The job paiq runs for a valid v2 document, or the problems of the mapped job (v2 paths)."""
    commands = _commands(job, document, limits.max_string_bytes)
    auths = _auths(document)
    if isinstance(commands, list) or isinstance(auths, list):
        return Rejected(problems=tuple((commands if isinstance(commands, list) else [])
                                       + (auths if isinstance(auths, list) else [])))
    fields = stored(v1_fields(job, document, commands, auths))
    problems = limit_problems(fields, limits)
    if problems:
        return Rejected(problems=tuple(_translated(problems, fields)))
    try:
        config = JobConfig.model_validate(fields)
    except ValidationError as e:
        return Rejected(problems=tuple(_translated(problems_from(e), fields)))
    problems = config_problems(config) + spelling_problems(config)
    for i, role in enumerate(config.task_roles):
        if role.image != config.image and not re.fullmatch(IMAGE_PATTERN, role.image):
            problems.append(ConfigProblem(path=f"taskRoles[{i}].image", rule=(
                f"must name a Docker image reference like registry:5000/team/name:tag (lowercase name, optional "
                f"tag and digest), got {role.image!r}")))
    if problems:
        return Rejected(problems=tuple(_translated(problems, fields)))
    return Accepted(config=config, raw=masked(stored(document)), warnings=plugin_warnings(config.extras))
