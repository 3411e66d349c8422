"""Protocol v2 at submit, in OpenPAI v1.8's order: a body in, paiq's :class:`JobConfig` or named problems out.

The steps (``middlewares/v2/protocol.js`` ``protocol.submit``, then paiq's own job):

1. the body read as YAML under the limits of JSON bodies (:mod:`shared.jobconfig.v2.yamlbody`), and the
   decoded document walked for those limits (keys, strings, NUL, integers: :func:`shared.jobconfig.limits.walk`);
2. the schema (:mod:`shared.jobconfig.v2.model`, with the patterns of mapping keys checked here): every
   problem listed, as ajv listed all its errors;
3. the cross-checks, in OpenPAI's order, the first failure alone (OpenPAI stopped there): a prerequisite
   name repeated within its type, a deployment name repeated, a role's ``prerequisites`` naming an
   undeclared one, a role's ``script``, ``output``, ``data``, ``dockerImage`` naming none of that type,
   ``defaults.deployment`` naming no deployment;
4. rendering (:mod:`shared.jobconfig.v2.render`): registry credentials with ``$secrets``, each role's
   command with ``$parameters`` and its prerequisites;
5. the job as paiq runs it (:mod:`shared.admission.v2.tojob`): the v1 models and rules, the job's
   limits (tasks, roles, its document's size), each problem named by its v2 path.

Every refusal names the path and the rule (the caller answers 400 ``InvalidProtocolError``); the stored
config is the document with its secrets masked.

Where paiq is deliberately stricter than OpenPAI v1.8 (each case is in the corpus test,
tests/unit/test_protocol_v2_corpus.py, ``DIFFERENCES``):

====================================  ==========================================  =====================================
body                                  OpenPAI v1.8                                paiq, and why
====================================  ==========================================  =====================================
``taskRoles: []`` (or any list)       accepted: a job with no task roles          refused: a job of no tasks never runs
``taskRoles: "x"`` (not a mapping)    500 (the middleware crashed)                400, named
``dockerImage: constructor``          accepted (JavaScript's ``in`` finds         refused: names no prerequisite
                                      ``Object.prototype.constructor``)
a non-string value in ``auth``        500 (``render`` of a number crashed)        400, named
a mustache error in a command         500 (``Unclosed tag at 21``)                400, named, with mustache's words
``cpu`` < 1, ``memoryMB`` < 100,      accepted (no minimum in the schema)         refused with paiq's v1 bounds: a
``gpu`` < 0, a port count of 0,                                                   task needs a CPU and memory, a
``instances`` > 5000, a role name                                                 label a port; the job limits
over 64 characters                                                                (PAIQ_MAX_*) hold for every protocol
``completion`` below -1               passed on to frameworkcontroller            refused: -1 is "never", others mean
                                                                                  nothing
``!!binary``, ``!!set``, ``!!omap``,  read by js-yaml                             refused: JSON cannot hold them
``!!pairs`` tags
bytes that are not UTF-8              read as U+FFFD                              refused
``extraContainerOptions.shmMB`` over  accepted                                    refused (v1's rule: shm is memory)
``memoryMB``
====================================  ==========================================  =====================================
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from shared.admission.v2.tojob import to_job_config
from shared.admission.validation import DEFAULT_LIMITS, Accepted, Rejected
from shared.jobconfig.limits import JobLimits, printable, walk
from shared.jobconfig.problems import ConfigProblem, json_type
from shared.jobconfig.v2.model import KEY_PATTERN, DockerImagePrerequisite, JobV2, problems_of
from shared.jobconfig.v2.yamlbody import load_yaml_body

PREREQUISITE_FIELDS = (("script", "script"), ("output", "output"), ("data", "data"), ("docker_image", "dockerimage"))


def _reject(problems: list[ConfigProblem]) -> Rejected:
    return Rejected(problems=tuple(problems))


def validate_v2_body(body: bytes | str, limits: JobLimits = DEFAULT_LIMITS) -> Accepted | Rejected:
    """A protocol v2 body (YAML or JSON text) as paiq's job, or the problems that refuse it."""
    document = load_yaml_body(body, limits)
    if isinstance(document, ConfigProblem):
        return _reject([document])
    return validate_v2(document, limits)


def validate_v2(document: Any, limits: JobLimits = DEFAULT_LIMITS) -> Accepted | Rejected:
    """A decoded v2 document (see the module's docstring for the steps)."""
    if not isinstance(document, Mapping):
        return _reject([ConfigProblem(path="(body)", rule=f"must be a mapping (a job), got {json_type(document)}")])
    limited = list(walk(document, limits).problems)
    if limited:
        return _reject(limited)
    problems = key_problems(document)
    try:
        job = JobV2.model_validate(document)
    except ValidationError as e:
        named = {p.path for p in problems}
        return _reject(problems + [p for p in problems_of(e) if p.path not in named])
    if problems:
        return _reject(problems)
    crossed = cross_check(job)
    if crossed is not None:
        return _reject([crossed])
    problems = auth_problems(job)
    if problems:
        return _reject(problems)
    return to_job_config(job, document, limits)


def _keys(mapping: object, path: str, what: str) -> list[ConfigProblem]:
    if not isinstance(mapping, Mapping):
        return []
    return [ConfigProblem(path=f"{path}.{printable(key, 64)}", rule=f"is not a valid {what}: must match {KEY_PATTERN}")
            for key in mapping if not re.fullmatch(KEY_PATTERN, key)]


def key_problems(document: Mapping[str, Any]) -> list[ConfigProblem]:
    """The schema's ``patternProperties`` (role names, port labels), and ``taskRoles`` a mapping."""
    roles = document.get("taskRoles")
    problems = []
    if "taskRoles" in document and not isinstance(roles, Mapping):
        problems.append(ConfigProblem(path="taskRoles", rule=(
            f"must be a mapping of task role names to task roles, got {json_type(roles)} (OpenPAI accepted a "
            "list, a job of no tasks; paiq refuses it)")))
    problems += _keys(roles, "taskRoles", "task role name")
    for name, role in roles.items() if isinstance(roles, Mapping) else ():
        resources = role.get("resourcePerInstance") if isinstance(role, Mapping) else None
        if isinstance(resources, Mapping):
            problems += _keys(resources.get("ports"), f"taskRoles.{name}.resourcePerInstance.ports", "port label")
    deployments = document.get("deployments")
    for i, deployment in enumerate(deployments if isinstance(deployments, list) else ()):
        if isinstance(deployment, Mapping):
            problems += _keys(deployment.get("taskRoles"), f"deployments[{i}].taskRoles", "task role name")
    return problems


def cross_check(job: JobV2) -> ConfigProblem | None:
    """OpenPAI's cross-checks (``protocolValidate`` after ajv), in its order; the first failure."""
    declared: dict[str, set[str]] = {t: set() for t in ("script", "output", "data", "dockerimage")}
    deployments: set[str] = set()
    return _duplicates(job, declared, deployments) or _references(job, declared, deployments)


def _duplicates(job: JobV2, declared: dict[str, set[str]], deployments: set[str]) -> ConfigProblem | None:
    for i, item in enumerate(job.prerequisites):
        if item.name in declared[item.type]:
            return ConfigProblem(path=f"prerequisites[{i}].name",
                                 rule=f"Duplicate {item.type} prerequisites {item.name}.")
        declared[item.type].add(item.name)
    for i, deployment in enumerate(job.deployments):
        if deployment.name in deployments:
            return ConfigProblem(path=f"deployments[{i}].name", rule=f"Duplicate deployments {deployment.name}.")
        deployments.add(deployment.name)
    return None


def _references(job: JobV2, declared: dict[str, set[str]], deployments: set[str]) -> ConfigProblem | None:
    every = set().union(*declared.values())
    for name, role in job.task_roles.items():
        for j, wanted in enumerate(role.prerequisites):
            if wanted not in every:
                return ConfigProblem(path=f"taskRoles.{name}.prerequisites[{j}]",
                                     rule=f"Prerequisite {wanted} does not exist.")
    for name, role in job.task_roles.items():
        for field, kind in PREREQUISITE_FIELDS:
            if field in role.model_fields_set and getattr(role, field) not in declared[kind]:
                alias = type(role).model_fields[field].alias or field
                return ConfigProblem(path=f"taskRoles.{name}.{alias}",
                                     rule=f"Prerequisite {getattr(role, field)} does not exist.")
    if "deployment" in job.defaults.model_fields_set and job.defaults.deployment not in deployments:
        return ConfigProblem(path="defaults.deployment",
                             rule=f"Default deployment {job.defaults.deployment} does not exist.")
    return None


def auth_problems(job: JobV2) -> list[ConfigProblem]:
    """Registry credentials are text (OpenPAI's rendering crashed on anything else)."""
    problems = []
    for i, item in enumerate(job.prerequisites):
        if isinstance(item, DockerImagePrerequisite):
            for key, value in (item.auth.model_extra or {}).items():
                if not isinstance(value, str):
                    problems.append(ConfigProblem(path=f"prerequisites[{i}].auth.{printable(key, 64)}",
                                                  rule=f"must be a string, got {json_type(value)}"))
    return problems
