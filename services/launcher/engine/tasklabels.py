"""The labels on a task's container: who it belongs to, so a restarted launcher finds its tasks again.

Written once, when the container is created (:func:`services.launcher.container.spec.container_spec`),
and read back from every container the engine lists or reports. Every ``paiq.<name>`` key is spelled
here and nowhere else: the engine's label filters are built from :meth:`TaskLabels.selector`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from shared.records import TaskSpec
from shared.taskref import TaskRef

PREFIX = "paiq."


class TaskLabels(BaseModel):
    """One task's container, as its labels name it. Reading is lenient where older containers may
    lack a label (user, virtual cluster, node, debug, memory); the task's identity is required."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    job: str
    attempt: int
    role: str
    index: int
    user: str = ""
    vc: str = ""
    node: str = ""
    debug: bool = False
    memory_mb: int = 0
    cpus: int = 0
    gpus: tuple[int, ...] = ()  # the node's GPU indices the task holds (label: "0,1")
    task_attempt: int = 0  # which run of the task (taskRetryCount); absent on a first run's older containers

    @property
    def ref(self) -> TaskRef:
        """The task the container runs (its labels name the job ``job``, a label older containers carry)."""
        return TaskRef(job_id=self.job, attempt=self.attempt, role=self.role, index=self.index,
                       task_attempt=self.task_attempt)

    @classmethod
    def of(cls, spec: TaskSpec, node_id: str) -> TaskLabels:
        return cls(job=spec.job_id, attempt=spec.attempt, role=spec.role, index=spec.index, user=spec.user,
                   vc=spec.virtual_cluster, node=node_id, debug=spec.is_debug, memory_mb=spec.memory_mb,
                   cpus=spec.cpus, gpus=spec.gpus, task_attempt=spec.task_attempt)

    def to_labels(self) -> dict[str, str]:
        return {PREFIX + name: _label_text(value) for name, value in self}

    @classmethod
    def from_labels(cls, labels: Mapping[str, str]) -> TaskLabels | None:
        """The task a container belongs to; None when it is not a paiq task's (or its labels are malformed)."""
        ours = {name: labels[PREFIX + name] for name in cls.model_fields if PREFIX + name in labels}
        try:
            return cls.model_validate(ours)
        except ValidationError:
            return None

    @classmethod
    def key(cls, name: str) -> str:
        """The label's key: ``paiq.<name>`` for one of this model's fields."""
        if name not in cls.model_fields:
            raise KeyError(f"no task label {name!r}")
        return PREFIX + name

    @classmethod
    def selector(cls, name: str, value: str | None = None) -> str:
        """An engine label filter: containers with that label (and that value, when given)."""
        return cls.key(name) if value is None else f"{cls.key(name)}={value}"

    @staticmethod
    def is_ours(key: str) -> bool:
        """Whether a label key is one of paiq's (the engine's listings keep only those)."""
        return key.startswith(PREFIX)

    @field_validator("debug", mode="before")
    @classmethod
    def _debug_flag(cls, value: Any) -> Any:
        return value == "1" if isinstance(value, str) else value

    @field_validator("memory_mb", "cpus", "task_attempt", mode="before")
    @classmethod
    def _memory(cls, value: Any) -> Any:
        return 0 if value == "" else value

    @field_validator("gpus", mode="before")
    @classmethod
    def _gpus(cls, value: Any) -> Any:
        if not isinstance(value, str):
            return value
        parts = value.split(",") if value else []
        return tuple(int(g) for g in parts) if all(g.isascii() and g.isdigit() for g in parts) else ()


def _label_text(value: object) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, tuple):
        return ",".join(str(v) for v in value)
    return str(value)
