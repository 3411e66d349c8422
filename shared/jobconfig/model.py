"""The OpenPAI v1 job config as validated, normalised pydantic values.

Field names follow the protocol (camelCase aliases); defaults are OpenPAI's (see OPENPAI.md). What Joi
let through beyond the plain types is declared on the fields (:mod:`shared.jobconfig.lenient`: integers
written as strings, null as the default), so these models, the validator and the published JSON Schema
read it from one place. Unknown fields (warned about), size limits and cross-field rules are
:mod:`shared.admission.validation`'s.
"""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator

from shared.jobconfig.lenient import JOI_INTEGER, EmptyMeansDefault, Internal, NullMeansDefault, defaults_for_nulls
from shared.jobconfig.notifykinds import Kind, switch_kinds

# OpenPAI v0.14's own jobName pattern: no ``~``, which separates the parts of paiq's job ids
# (``user~jobName~suffix``, shared.records.new_job_id). Role names and port labels may hold one.
JOB_NAME_PATTERN = r"^[A-Za-z0-9\-._]+$"
ROLE_NAME_PATTERN = r"^[A-Za-z0-9._~]+$"
PORT_LABEL_PATTERN = r"^[A-Za-z0-9._~]+$"
JOB_ENV_KEY_PATTERN = r"^\w+$"
EXTRAS_KEY_PATTERN = r"^[A-Za-z0-9._]+$"
# Docker's image reference grammar: [registry[:port]/]path[:tag][@digest], path components lowercase.
_LABEL = r"[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?"
# A first component is a registry only if it has a dot or a port, or is localhost (as Docker decides).
_DOMAIN = rf"(?:localhost(?::[0-9]+)?|{_LABEL}(?:\.{_LABEL})+(?::[0-9]+)?|{_LABEL}:[0-9]+)"
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
IMAGE_PATTERN = (rf"^(?:{_DOMAIN}/)?{_COMPONENT}(?:/{_COMPONENT})*(?::[A-Za-z0-9_][A-Za-z0-9_.-]{{0,127}})?"
                 r"(?:@[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,})?$")

# retryCount's two special values (frameworklauncher's RetryPolicyDescriptor, see shared.lifecycle.transitions):
RETRY_UNLIMITED = -1  # failures a user's code may cause are retried without limit; success ends the job
RETRY_ALWAYS = -2  # every completion, success included, starts a new attempt: runs until stopped

MAX_ROLE_TASKS = 5000
MAX_TASK_ROLES = 100
JobName = Annotated[str, StringConstraints(strict=True, pattern=JOB_NAME_PATTERN, max_length=255)]
RoleName = Annotated[str, StringConstraints(strict=True, pattern=ROLE_NAME_PATTERN, max_length=64)]
PortLabel = Annotated[str, StringConstraints(strict=True, pattern=PORT_LABEL_PATTERN, max_length=64)]
OptionalPath = Annotated[str, StringConstraints(strict=True, max_length=4096)]
EnvValue = str | int | float | bool


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    @model_validator(mode="before")
    @classmethod
    def _nulls_as_defaults(cls, data: Any) -> Any:
        return defaults_for_nulls(cls, data) if isinstance(data, dict) else data


class PortSpec(_Model):
    label: PortLabel
    # 0: the platform picks
    begin_at: Annotated[int, Field(strict=True, ge=0, le=65535), JOI_INTEGER] = Field(0, alias="beginAt")
    port_number: Annotated[int, Field(strict=True, ge=1, le=1000), JOI_INTEGER] = Field(1, alias="portNumber")


# OpenPAI gave every role these labels, one port each chosen by the platform, when its portList did not
# declare them (rest-server models/v1/job/yarn.js: ``for (let defaultPortLabel of ['http', 'ssh'])``).
DEFAULT_PORT_LABELS = ("http", "ssh")


class RegistryAuth(_Model):
    """Credentials of a private registry, given inline (protocol v2's ``auth`` of a ``dockerimage``, its
    ``$secrets`` rendered). Internal: never shown (``repr`` hides the password)."""

    username: str = ""
    password: str = Field("", repr=False)
    registry_uri: str = Field("", alias="registryuri")


class TaskRole(NullMeansDefault, _Model):
    name: RoleName
    # A role has at most as many tasks as a job (the default of PAIQ_MAX_JOB_TASKS, which the validator
    # checks on the whole job before this model): its host list alone passes Linux's 128 KiB at 5,956.
    task_number: Annotated[int, Field(strict=True, ge=1, le=MAX_ROLE_TASKS), JOI_INTEGER] = Field(1, alias="taskNumber")
    cpu_number: Annotated[int, Field(strict=True, ge=1, le=1024), JOI_INTEGER] = Field(1, alias="cpuNumber")
    memory_mb: Annotated[int, Field(strict=True, ge=100, le=16 * 1024 * 1024), JOI_INTEGER] = Field(
        100, alias="memoryMB")
    shm_mb: Annotated[int, Field(strict=True, ge=1), JOI_INTEGER] = Field(64, alias="shmMB")
    gpu_number: Annotated[int, Field(strict=True, ge=0, le=1024), JOI_INTEGER] = Field(0, alias="gpuNumber")
    port_list: tuple[PortSpec, ...] = Field((), alias="portList")
    command: Annotated[str, StringConstraints(strict=True, min_length=1, max_length=65536)]
    min_failed_task_count: Annotated[int, Field(strict=True, ge=1), JOI_INTEGER] | None = Field(
        1, alias="minFailedTaskCount")
    min_succeeded_task_count: Annotated[int, Field(strict=True, ge=1), JOI_INTEGER] | None = Field(
        None, alias="minSucceededTaskCount"
    )
    # Internal (protocol v2): the role's own image and its registry's credentials ("" and None: the
    # job's), and its task-level retries (v2's taskRetryCount; None: none asked).
    image: Annotated[str, StringConstraints(strict=True, max_length=1024), Internal()] = ""
    registry_auth: Annotated[RegistryAuth | None, Internal()] = Field(None, alias="registryAuth", repr=False)
    task_retry_count: Annotated[int | None, Field(strict=True, ge=-1), Internal()] = Field(
        None, alias="taskRetryCount")

    @property
    def ports(self) -> tuple[PortSpec, ...]:
        """The ports each task of the role gets: its portList, then ``http`` and ``ssh`` (one
        platform-chosen port each) for those of the two it does not declare."""
        declared = {p.label for p in self.port_list}
        return self.port_list + tuple(PortSpec(label=label, begin_at=0, port_number=1)
                                      for label in DEFAULT_PORT_LABELS if label not in declared)


class JobConfig(NullMeansDefault, _Model):
    job_name: JobName = Field(alias="jobName")
    image: Annotated[str, StringConstraints(strict=True, min_length=1, max_length=1024)]
    auth_file: OptionalPath = Field("", alias="authFile")
    data_dir: OptionalPath = Field("", alias="dataDir")
    output_dir: OptionalPath = Field("", alias="outputDir")
    code_dir: OptionalPath = Field("", alias="codeDir")
    virtual_cluster: Annotated[str, StringConstraints(strict=True, pattern=r"^[A-Za-z0-9_\-]+$"),
                               EmptyMeansDefault()] = Field("default", alias="virtualCluster")
    task_roles: Annotated[tuple[TaskRole, ...], Field(min_length=1, max_length=MAX_TASK_ROLES)] = Field(
        alias="taskRoles")
    gpu_type: Annotated[str, StringConstraints(strict=True, max_length=128)] = Field("", alias="gpuType")
    retry_count: Annotated[int, Field(strict=True, ge=RETRY_ALWAYS, le=1000), JOI_INTEGER] = Field(
        0, alias="retryCount")
    job_envs: dict[str, EnvValue] = Field(default_factory=dict, alias="jobEnvs")
    extras: dict[str, Any] = Field(default_factory=dict)
    # Internal (protocol v2): the credentials of its image's registry, its parameters (already rendered
    # into the commands) and its secrets (rendered into the commands only when a task starts:
    # shared.jobconfig.v2.render.render_secrets). Never shown: a v2 job's config is shown from its
    # masked document (a raw config with protocolVersion 2).
    registry_auth: Annotated[RegistryAuth | None, Internal()] = Field(None, alias="registryAuth", repr=False)
    parameters: Annotated[dict[str, Any], Internal()] = Field(default_factory=dict)
    secrets: Annotated[dict[str, Any], Internal()] = Field(default_factory=dict, repr=False)

    @property
    def total_tasks(self) -> int:
        return sum(r.task_number for r in self.task_roles)

    @property
    def total_gpus(self) -> int:
        return sum(r.task_number * r.gpu_number for r in self.task_roles)

    def image_of(self, role: TaskRole) -> str:
        """The image a role's tasks run: its own (protocol v2) or the job's."""
        return role.image or self.image

    def role(self, name: str) -> TaskRole:
        for r in self.task_roles:
            if r.name == name:
                return r
        raise KeyError(name)

    def is_debug(self) -> bool:
        return env_flag(self.job_envs.get("isDebug"))

    def notification_kinds(self) -> frozenset[Kind] | None:
        """What ``extras.jobStatusChangeNotification`` asks its owner be told of (None: the job has none)."""
        return switch_kinds(self.extras)


def env_name(part: str) -> str:
    """A role name or port label made usable inside an environment variable name (``.``/``~`` -> ``_``)."""
    return re.sub(r"[^A-Za-z0-9_]", "_", part)


def env_flag(value: EnvValue | None) -> bool:
    """jobEnvs booleans arrive as JSON true or as the strings "true"/"1"."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        return value.strip().lower() in {"true", "1", "yes"}
    return False


def env_value(value: EnvValue) -> str:
    """The text a container sees for a jobEnvs value (JSON spelling for booleans)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
