"""How large a job's document in MongoDB can grow, judged from the submitted body alone.

A job document (:meth:`shared.records.JobRecord.to_document`) holds the config twice (as submitted and
as validated) and one record per task, and the status service writes into those records while the job
runs: the node, IP, ports, GPUs and container of each task, its exit code, reason and the end of its
stderr (``shared.lifecycle.transitions.kept_diagnostics``). MongoDB refuses a document over 16 MiB, so a job whose
document could pass paiq's limit is refused at submit, before any record is built.

The estimate is a bound computed in O(roles x ports): the submitted config's exact BSON size (from
:func:`shared.jobconfig.limits.walk`); the validated config as at most that plus every field the model adds at
its largest default; every task's record at its largest (one worst record sized per role, from the
role's own name, GPUs and ports); the list of nodes holding tasks; a fixed allowance for the job's
other fields. Text paiq writes is counted at a byte a character (stderr tails and reasons are ASCII in
practice; the diagnostics budget is in characters).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from shared.jobconfig.lenient import count_of
from shared.jobconfig.limits import bson_bytes, digits_below
from shared.jobconfig.model import DEFAULT_PORT_LABELS, JobConfig, PortSpec, TaskRole
from shared.lifecycle.transitions import TASK_DIAGNOSTICS_MAX, kept_diagnostics
from shared.records import TaskRecord, TaskState, TaskSubState

NODE_ID_MAX = 64  # PAIQ_NODE_ID: 1-64 letters, digits, '-' or '_'
IP_MAX = 64  # PAIQ_NODE_IP, as the operator wrote it (an IPv6 address is at most 45)
CONTAINER_ID = 64  # Docker's full container id
REASON_MAX = 1024  # why a task ended as the launcher says it (an engine's error, an exit spec's phrase)
# Every field of the job document but the two configs and the tasks: ids, names, states, times, counters,
# the waiting reason, the job's exit reason and diagnostics (the trigger task's whole stderr tail,
# 4,000 characters) and the warnings (at most 21, their keys cut to 64 characters).
JOB_FIELDS_BYTES = 32 * 1024
_WORST_TIME_MS = 2**42  # any time in ms since the epoch until the year 2109: an 8-byte integer


@dataclass(frozen=True)
class RoleShape:
    """What a role's task records grow with: its name, tasks, GPUs and ports (defaults included)."""

    name: str
    tasks: int
    gpus: int
    ports: tuple[tuple[str, int], ...]  # (label, ports of that label)


@dataclass(frozen=True)
class DocumentEstimate:
    raw: int  # the config as submitted, as BSON
    config: int  # the config as validated, at most
    tasks: int  # every task's record at its largest, and the list of nodes holding them
    total: int


def role_shapes(roles: object) -> list[RoleShape]:
    """Each role's shape, read from the raw ``taskRoles`` before validation (values the model would
    refuse count as their defaults; counts held within the model's bounds)."""
    if not isinstance(roles, list):
        return []
    shapes = []
    for role in roles:
        if not isinstance(role, Mapping):
            continue
        name = role.get("name")
        declared: dict[str, int] = {}
        ports = role.get("portList")
        for port in ports if isinstance(ports, list) else ():
            if isinstance(port, Mapping) and isinstance(port.get("label"), str):
                declared.setdefault(port["label"], count_of(port.get("portNumber"), 1, 1, 1000))
        for label in DEFAULT_PORT_LABELS:
            declared.setdefault(label, 1)
        shapes.append(RoleShape(name=name if isinstance(name, str) else "",
                                tasks=count_of(role.get("taskNumber"), 1, 0, 2**63),
                                gpus=count_of(role.get("gpuNumber"), 0, 0, 1024), ports=tuple(declared.items())))
    return shapes


def worst_task_record(role: RoleShape, total_tasks: int) -> TaskRecord:
    """A task of ``role`` as large as its record can grow while the job runs."""
    return TaskRecord(
        role=role.name, index=max(0, role.tasks - 1), state=TaskState.SUCCEEDED, node_id="n" * NODE_ID_MAX,
        ip="i" * IP_MAX, gpus=(99,) * role.gpus, ports={label: (65535,) * n for label, n in role.ports},
        container_id="c" * CONTAINER_ID, exit_code=-(2**40), reason="r" * REASON_MAX,
        diagnostics=kept_diagnostics("d" * TASK_DIAGNOSTICS_MAX, total_tasks), started_ms=_WORST_TIME_MS,
        completed_ms=_WORST_TIME_MS, sub_state=max(TaskSubState, key=len), kept_until_ms=_WORST_TIME_MS)


def _largest_fields(model: type[BaseModel]) -> int:
    """What a model's fields can add to a document beyond what the submitted body held: each field's
    key, and a value of at most 12 bytes (an 8-byte integer, a default like "default", an empty list)."""
    return sum(2 + len(field.alias or name) + 12 for name, field in model.model_fields.items())


_CONFIG_FIELDS = _largest_fields(JobConfig)
_ROLE_FIELDS = _largest_fields(TaskRole)
_PORT_FIELDS = _largest_fields(PortSpec)


def _array(items: int) -> int:
    """A BSON array's own bytes: its length, terminator, and each item's type byte and key ("0", "1", ...)."""
    return 5 + 2 * items + digits_below(items)


def job_document_bytes(raw_bson: int, roles: Sequence[RoleShape], declared_ports: int) -> DocumentEstimate:
    """The largest the job document of a body of ``raw_bson`` bytes (as BSON) and ``roles`` can grow."""
    total_tasks = sum(r.tasks for r in roles)
    config = raw_bson + _CONFIG_FIELDS + len(roles) * _ROLE_FIELDS + declared_ports * _PORT_FIELDS
    records = sum(r.tasks * bson_bytes(_dumped(worst_task_record(r, total_tasks))) for r in roles if r.tasks)
    nodes = _array(total_tasks) + total_tasks * (4 + NODE_ID_MAX + 1)  # hold_nodes: a node id per task at most
    tasks = _array(total_tasks) + records + nodes
    return DocumentEstimate(raw=raw_bson, config=config, tasks=tasks,
                            total=JOB_FIELDS_BYTES + raw_bson + config + tasks)


def _dumped(record: TaskRecord) -> dict[str, Any]:
    return record.model_dump(mode="json")


def declared_ports(roles: object) -> int:
    """Entries of every role's ``portList`` in the raw body (each becomes a port spec of the config)."""
    if not isinstance(roles, list):
        return 0
    return sum(len(r["portList"]) for r in roles if isinstance(r, Mapping) and isinstance(r.get("portList"), list))
