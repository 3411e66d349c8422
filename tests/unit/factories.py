"""Factories for the pure cores' tests: small valid values that a test overrides where it matters.

``config_dict`` / ``role_dict`` give the raw JSON a user submits (protocol spelling, camelCase);
``make_config`` runs that through the real validation, so every config a test uses is one paiq would
have accepted. Nodes, tasks and jobs are records as the store keeps them.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

from shared.admission.validation import Accepted, validate_job_config
from shared.jobconfig.limits import JobLimits
from shared.jobconfig.model import JobConfig
from shared.records import GpuInfo, JobRecord, JobState, NodeRecord, TaskRecord, TaskState, job_id_of
from shared.scheduling.placement import Plan, TaskPlacement

# --- job configs -----------------------------------------------------------------------------


def port_dict(label: str = "http", begin_at: int = 0, port_number: int = 1) -> dict[str, Any]:
    return {"label": label, "beginAt": begin_at, "portNumber": port_number}


def role_dict(name: str = "main", **overrides: Any) -> dict[str, Any]:
    """One task role as submitted; keyword names are the protocol's (``taskNumber=2``)."""
    role: dict[str, Any] = {"name": name, "command": "python train.py"}
    role.update(overrides)
    return role


def config_dict(*roles: dict[str, Any], **overrides: Any) -> dict[str, Any]:
    """A submitted job config (protocol spelling). Without roles: one role ``main`` of one task."""
    raw: dict[str, Any] = {
        "jobName": "job1",
        "image": "busybox:latest",
        "taskRoles": list(roles) if roles else [role_dict()],
    }
    raw.update(overrides)
    return raw


def make_config(*roles: dict[str, Any], limits: JobLimits | None = None, **overrides: Any) -> JobConfig:
    """A validated :class:`JobConfig`; fails the test at once if the factory input is not valid."""
    result = validate_job_config(config_dict(*roles, **overrides), *(() if limits is None else (limits,)))
    assert isinstance(result, Accepted), getattr(result, "message", result)
    return result.config


def strip_js_comments(text: str) -> str:
    """The seeds' examples are ``js`` blocks with whole-line ``//`` comments; drop those lines."""
    return "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("//"))


def load_seed_config(text: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(strip_js_comments(text))
    return loaded


# --- nodes -----------------------------------------------------------------------------------


def make_node(
    node_id: str = "n1",
    *,
    ip: str | None = None,
    cpus: int = 8,
    memory_mb: int = 32768,
    gpus: Sequence[str] | Sequence[tuple[int, str]] = (),
    port_range: tuple[int, int] = (20000, 20099),
    lost: bool = False,
) -> NodeRecord:
    """A live node. ``gpus`` is a list of types (indices 0..n-1) or of ``(index, type)`` pairs."""
    infos = tuple(
        GpuInfo(index=g[0], type=g[1]) if isinstance(g, tuple) else GpuInfo(index=i, type=g)
        for i, g in enumerate(gpus)
    )
    return NodeRecord(
        id=node_id,
        ip=ip or f"10.0.0.{sum(map(ord, node_id)) % 250 + 1}",
        cpus=cpus,
        memory_mb=memory_mb,
        gpus=infos,
        port_range=port_range,
        lost=lost,
    )


# --- tasks and jobs --------------------------------------------------------------------------


def make_task(
    role: str = "main",
    index: int = 0,
    state: TaskState = TaskState.RUNNING,
    *,
    node_id: str | None = None,
    ip: str | None = None,
    gpus: Iterable[int] = (),
    ports: dict[str, tuple[int, ...]] | None = None,
    exit_code: int | None = None,
    completed_ms: int | None = None,
    reason: str = "",
    diagnostics: str = "",
) -> TaskRecord:
    return TaskRecord(
        role=role, index=index, state=state, node_id=node_id, ip=ip, gpus=tuple(gpus),
        ports=ports or {}, exit_code=exit_code, completed_ms=completed_ms, reason=reason,
        diagnostics=diagnostics,
    )


def make_job(
    config: JobConfig | None = None,
    *,
    user: str = "alice",
    tasks: Iterable[TaskRecord] | None = None,
    state: JobState = JobState.RUNNING,
    attempt: int = 0,
) -> JobRecord:
    """A job record; without ``tasks`` every task of the config is WAITING and unplaced."""
    config = config or make_config()
    if tasks is None:
        tasks = [TaskRecord(role=r.name, index=i) for r in config.task_roles for i in range(r.task_number)]
    return JobRecord(
        id=job_id_of(user, config.job_name),
        user=user,
        name=config.job_name,
        virtual_cluster=config.virtual_cluster,
        config=config,
        raw_config=config.model_dump(mode="json", by_alias=True),
        state=state,
        created_ms=1_700_000_000_000,
        attempt=attempt,
        tasks=tuple(tasks),
    )


def placed_job(config: JobConfig, plan: Plan, state: TaskState = TaskState.RUNNING,
               *, user: str = "bob") -> JobRecord:
    """A job whose tasks sit where ``plan`` put them, all in ``state``."""
    return make_job(config, user=user, tasks=[
        make_task(t.role, t.index, state, node_id=t.node_id, ip=t.ip, gpus=t.gpus, ports=dict(t.ports))
        for t in plan.tasks
    ])


def make_plan(*tasks: TaskPlacement) -> Plan:
    return Plan(tasks=tasks)


def placement(role: str, index: int, node: NodeRecord, *, gpus: Iterable[int] = (),
              ports: dict[str, tuple[int, ...]] | None = None) -> TaskPlacement:
    return TaskPlacement(role=role, index=index, node_id=node.id, ip=node.ip, gpus=tuple(gpus),
                         ports=ports or {})


def make_nodes(count: int, *, prefix: str = "n", **node: Any) -> list[NodeRecord]:
    """``count`` alike nodes ``n0``, ``n1``, ...; keywords as :func:`make_node`."""
    return [make_node(f"{prefix}{i}", **node) for i in range(count)]
