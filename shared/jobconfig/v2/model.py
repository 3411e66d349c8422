"""OpenPAI v1.8's protocol v2 schema (rest-server ``src/config/v2/protocol.js``) as pydantic models.

Each rule of the ajv schema is a field here: types are strict (ajv converted nothing; an integer is a
number without a fraction, so YAML's ``2.0`` is 2), ``additionalProperties: false`` is ``extra="forbid"``,
``true`` is ``extra="allow"``. What pydantic cannot say as the schema did is checked by
:mod:`shared.admission.v2.checks` before these models: the patterns of mapping keys (task role names,
port labels) and the deliberate differences listed there. Refusals are worded by :func:`problems_of`:
the path in the document (``taskRoles.worker.resourcePerInstance.gpu``) and the rule.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, StringConstraints, ValidationError
from pydantic_core import PydanticCustomError

from shared.jobconfig.problems import ConfigProblem, json_type, rule_for, shown

NAME_PATTERN = r"^[a-zA-Z0-9_-]+$"  # the job's, a prerequisite's and a deployment's name
KEY_PATTERN = r"^[a-zA-Z_][a-zA-Z0-9_]*$"  # task role names and port labels
PREREQUISITE_TYPES = ("script", "output", "data", "dockerimage")
NEVER = -1  # frameworkcontroller's "never a trigger" for a role's min counts (minFailed/SucceededInstances)


def ajv_integer(value: object) -> object:
    """An integer as ajv's ``type: integer`` took it: a number without a fraction (``2.0`` is 2)."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def _protocol_version(value: object) -> object:
    return 2 if value == "2" or (isinstance(value, int | float) and not isinstance(value, bool) and value == 2) \
        else value


def _version(value: object) -> object:
    if isinstance(value, str | int | float) and not isinstance(value, bool):
        return value
    raise PydanticCustomError("v2_rule", "must be a string or a number, got {got}", {"got": json_type(value)})


def _no_value(value: object) -> object:
    raise PydanticCustomError("v2_rule", "is not an option (OpenPAI's schema refused every value of this key)")


Integer = Annotated[int, BeforeValidator(ajv_integer)]
Name = Annotated[str, StringConstraints(pattern=NAME_PATTERN, max_length=255)]
ProtocolVersion = Annotated[Literal[2], BeforeValidator(_protocol_version)]
Version = Annotated[Any, AfterValidator(_version)]
Strings = list[str]
SomeStrings = Annotated[list[str], Field(min_length=1)]


class _Strict(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", strict=True, populate_by_name=True)


class _Open(BaseModel):
    model_config = ConfigDict(frozen=True, extra="allow", strict=True, populate_by_name=True)


class _BaseFields(BaseModel):
    """``base.json``: what the job and each prerequisite may say of themselves.

    Optional fields have a default that is not None: ajv refused ``null`` wherever the schema named a
    type without it, and ``model_fields_set`` tells a field written from one left out.
    """

    protocol_version: ProtocolVersion = Field(2, alias="protocolVersion")
    version: Version = ""
    contributor: str = ""
    description: str = ""


class ScriptPrerequisite(_BaseFields, _Open):
    """A ``script`` or ``output`` prerequisite (runtime plugins read their other keys)."""

    name: Name
    type: Literal["script", "output"]
    plugin: str = ""
    require: Strings = Field(default_factory=list)
    uri: str = ""


class DataPrerequisite(_BaseFields, _Open):
    name: Name
    type: Literal["data"]
    plugin: str = ""
    require: Strings = Field(default_factory=list)
    uri: Strings = Field(default_factory=list)


class RegistryAuth(_Open):
    """A private registry's credentials (any other key is allowed and rendered too)."""

    username: str = ""
    password: str = ""
    registryuri: str = ""


class DockerImagePrerequisite(_BaseFields, _Strict):
    name: Name
    type: Literal["dockerimage"]
    uri: str
    auth: RegistryAuth = Field(default_factory=RegistryAuth)


Prerequisite = Annotated[ScriptPrerequisite | DataPrerequisite | DockerImagePrerequisite, Field(discriminator="type")]


class Completion(_Strict):
    min_failed_instances: Integer | None = Field(None, alias="minFailedInstances")
    min_succeeded_instances: Integer | None = Field(None, alias="minSucceededInstances")


class ExtraContainerOptions(_Open):
    shm_mb: Integer = Field(512, alias="shmMB")  # v2's /dev/shm default (models/v2/job/k8s.js)
    additional_properties: Annotated[Any, AfterValidator(_no_value)] = Field(None, alias="additionalProperties")


class Resources(_Strict):
    cpu: Integer
    memory_mb: Integer = Field(alias="memoryMB")
    gpu: Integer
    ports: Annotated[dict[str, Integer], Field(min_length=1)] | None = None


class TaskRole(_Strict):
    protocol_version: ProtocolVersion = Field(2, alias="protocolVersion")
    instances: Annotated[Integer, Field(ge=1)] = 1
    completion: Completion = Field(default_factory=Completion)
    task_retry_count: Integer = Field(0, alias="taskRetryCount")
    prerequisites: Strings = Field(default_factory=list)
    docker_image: str = Field(alias="dockerImage")
    data: str = ""
    output: str = ""
    script: str = ""
    extra_container_options: ExtraContainerOptions = Field(default_factory=ExtraContainerOptions,
                                                           alias="extraContainerOptions")
    resource_per_instance: Resources = Field(alias="resourcePerInstance")
    commands: SomeStrings


class DeploymentRole(_Strict):
    pre_commands: SomeStrings = Field(default_factory=list, alias="preCommands")
    post_commands: SomeStrings = Field(default_factory=list, alias="postCommands")


class Deployment(_Open):
    protocol_version: ProtocolVersion = Field(2, alias="protocolVersion")
    name: Name
    task_roles: Annotated[dict[str, DeploymentRole], Field(min_length=1)] = Field(alias="taskRoles")


class Defaults(_Open):
    """``defaults``: ``deployment``, and any other key (``virtualCluster``, read by the job's mapping)."""

    deployment: str = ""


class JobV2(_BaseFields, _Strict):
    """A protocol v2 job as its schema accepts it (key order of ``taskRoles`` kept: OpenPAI's order)."""

    protocol_version: ProtocolVersion = Field(alias="protocolVersion")
    name: Name
    type: Literal["job"]
    prerequisites: Annotated[list[Prerequisite], Field(min_length=1)] = Field(default_factory=list)
    parameters: dict[str, Any] = Field(default_factory=dict)
    secrets: dict[str, Any] = Field(default_factory=dict)
    job_retry_count: Annotated[Integer, Field(ge=0)] = Field(0, alias="jobRetryCount")
    task_roles: Annotated[dict[str, TaskRole], Field(min_length=1)] = Field(alias="taskRoles")
    deployments: Annotated[list[Deployment], Field(min_length=1)] = Field(default_factory=list)
    defaults: Defaults = Field(default_factory=Defaults)
    extras: dict[str, Any] = Field(default_factory=dict)


# --- refusals ---------------------------------------------------------------------------------------

_TAGS = {"script", "output", "data", "dockerimage", "ScriptPrerequisite", "DataPrerequisite",
         "DockerImagePrerequisite"}


def _path(loc: tuple[int | str, ...]) -> str:
    out = ""
    parts = list(loc)
    for i, part in enumerate(parts):
        if isinstance(part, int):
            out += f"[{part}]"
        elif i > 0 and parts[i - 1] != "prerequisites" and isinstance(parts[i - 1], int) and part in _TAGS \
                and i >= 2 and parts[i - 2] == "prerequisites":
            continue  # the union's branch, not a key of the document
        elif part.startswith("function-") or part.endswith("]"):
            continue  # a validator's or a constrained type's own step
        else:
            out += f".{part}" if out else part
    return out or "(body)"


def _rule(err: Any) -> str:
    kind = err["type"]
    value = err.get("input")
    ctx = err.get("ctx") or {}
    if kind == "int_type":
        return f"must be an integer, got {json_type(value)}" + (f" {shown(value)}" if value is not None else "")
    if kind == "extra_forbidden":
        return "is not a field of protocol v2"
    if kind == "union_tag_invalid":
        return f"type must be one of {', '.join(PREREQUISITE_TYPES)}, got {shown(ctx.get('tag'))}"
    if kind == "union_tag_not_found":
        return f"is required: type, one of {', '.join(PREREQUISITE_TYPES)}"
    if kind == "literal_error":
        return f"must be {ctx.get('expected')}, got {shown(value)}"
    if kind == "v2_rule":
        return str(err["msg"])
    if kind == "too_short" and isinstance(value, dict):
        return f"must have at least {ctx.get('min_length')} entry"
    return rule_for(err)


def problems_of(error: ValidationError) -> list[ConfigProblem]:
    """pydantic's errors as problems (the path in the document, our own rule), one per path and rule."""
    out: list[ConfigProblem] = []
    seen: set[tuple[str, str]] = set()
    for err in error.errors(include_url=False):
        problem = ConfigProblem(path=_path(tuple(err["loc"])), rule=_rule(err))
        if (problem.path, problem.rule) not in seen:
            seen.add((problem.path, problem.rule))
            out.append(problem)
    return out
