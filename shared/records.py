"""What paiq keeps about jobs, tasks and nodes: the documents of MongoDB as pydantic values."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterable, Iterator, Mapping
from enum import StrEnum
from typing import Any, NamedTuple

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from shared.jobconfig.limits import bson_bytes
from shared.jobconfig.model import JobConfig, TaskRole
from shared.jobconfig.priority import FIELD_PATH, priority_class_of, written_class
from shared.keywords import name_keys
from shared.packing import PACK_MIN_BYTES, configs_once, configs_whole, pack, unpack
from shared.taskref import TaskRef


def now_ms() -> int:
    return int(time.time() * 1000)


def job_id_of(user: str, job_name: str) -> str:
    """OpenPAI's job key: ``<user>~<jobName>`` (``~`` cannot appear in a user name)."""
    return f"{user}~{job_name}"


def new_job_id(user: str, job_name: str) -> str:
    """The id of one submission: OpenPAI's key plus a random suffix, so a job deleted and submitted
    again under its name is a different job to every service, container and event."""
    return f"{job_id_of(user, job_name)}~{uuid.uuid4().hex[:8]}"


class JobState(StrEnum):
    WAITING = "WAITING"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    STOPPED = "STOPPED"
    UNKNOWN = "UNKNOWN"

    @property
    def is_final(self) -> bool:
        return self in {JobState.SUCCEEDED, JobState.FAILED, JobState.STOPPED}


class TaskState(StrEnum):
    WAITING = "WAITING"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    STOPPED = "STOPPED"

    @property
    def is_final(self) -> bool:
        return self in {TaskState.SUCCEEDED, TaskState.FAILED, TaskState.STOPPED}


class SubState(StrEnum):
    """Where a job is within its state (``subState`` in answers): the contract between the services that
    set it (scheduler, status) and those that read it (submit, the store's queries)."""

    QUEUED = "queued"  # WAITING for placement
    STARTING = "starting"  # placed, its containers being started
    PULLING = "pulling image"  # placed, a node pulling its image (a task of it is TaskSubState.PULLING)
    RUNNING = "running"
    RETRY_PENDING = "retry pending"  # WAITING for its next attempt's backoff
    STOPPING = "stopping"  # over, its last containers being stopped
    COMPLETED = "completed"  # over, nothing left to stop


class TaskSubState(StrEnum):
    """Where a task not yet ended is, beyond its state (``subState`` of a task in answers, ``sub_state`` of
    ``task.progress``): set by the launcher that runs it, cleared when it starts or ends."""

    NONE = ""
    PULLING = "pulling image"  # its node pulls its image (the job is then SubState.PULLING)
    KEPT = "kept for debugging"  # isDebug: its command failed, its container is kept until ``kept_until_ms``


ACTIVE_JOB_STATES = (JobState.WAITING.value, JobState.RUNNING.value)


class _Record(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore", populate_by_name=True)


class TaskSpec(_Record, TaskRef):
    """Everything a launcher needs to start one task: resolved, so it decides nothing."""

    user: str
    virtual_cluster: str
    image: str
    command: str
    env: dict[str, str]
    cpus: int
    memory_mb: int
    shm_mb: int
    gpus: tuple[int, ...] = ()
    ports: dict[str, tuple[int, ...]] = Field(default_factory=dict)
    auth_file: str = ""
    code_dir: str = ""
    is_debug: bool = False


class TaskRecord(_Record):
    role: str
    index: int
    state: TaskState = TaskState.WAITING
    node_id: str | None = None
    ip: str | None = None
    gpus: tuple[int, ...] = ()
    ports: dict[str, tuple[int, ...]] = Field(default_factory=dict)
    container_id: str | None = None
    exit_code: int | None = None
    reason: str = ""
    diagnostics: str = ""
    started_ms: int | None = None
    completed_ms: int | None = None
    sub_state: TaskSubState = TaskSubState.NONE
    kept_until_ms: int | None = None  # isDebug: the failed task's container is kept until then
    # Re-runs of the task in place within this attempt (protocol v2's taskRetryCount: shared.lifecycle.taskretry);
    # ``retries`` is also the number of its current run (TaskRef.task_attempt). ``accountable_retries``: those
    # counted against taskRetryCount (the others were the platform's fault: transient exits).
    retries: int = 0
    accountable_retries: int = 0


class PreemptedBy(_Record):
    """The scheduler's decision to stop an attempt of the job for a waiting job (set by the scheduler,
    carried out by the status service: the attempt ends as a platform failure and is queued again)."""

    attempt: int  # the attempt it stops
    by: str  # the waiting job's id
    by_vc: str
    by_priority: str  # the waiting job's priority class
    why: str  # why this job was eligible ("borrowed capacity of vc a", "priority test < prod in vc a")
    at_ms: int
    decision: str = Field(default_factory=lambda: uuid.uuid4().hex[:12])  # this decision, among others alike

    @property
    def reason(self) -> str:
        return f"preempted by job {self.by} ({self.by_priority}, vc {self.by_vc}): {self.why}"


LINEAGE_MAX = 16  # the jobs a job remembers having been preempted by (the most recent)


class RetryCounts(_Record):
    """Retries by whose fault: the user's (count against retryCount), the platform's, resources'."""

    user: int = 0
    platform: int = 0
    resource: int = 0

    @property
    def total(self) -> int:
        return self.user + self.platform + self.resource


class AttemptRecord(_Record):
    """One finished attempt of a job, as it ended: its tasks and why it ended."""

    attempt: int
    tasks: tuple[TaskRecord, ...]
    launched_ms: int | None = None
    completed_ms: int | None = None
    exit_code: int | None = None
    exit_phrase: str = ""
    exit_type: str = ""
    exit_reason: str = ""
    trigger_role: str | None = None
    trigger_index: int | None = None

    def to_document(self, job_id: str) -> dict[str, Any]:
        """The attempt as ``job_attempts`` keeps it (``_id`` ``<job>/<attempt>``), its tasks packed when many."""
        doc = {"_id": f"{job_id}/{self.attempt}", "job_id": job_id,
               **self.model_dump(mode="json", exclude={"tasks"})}
        doc.update(task_fields(self.tasks))
        return doc

    @classmethod
    def from_document(cls, doc: dict[str, Any]) -> AttemptRecord:
        """An archived attempt, its tasks packed or plain."""
        tasks = doc.get(PACKED_TASKS)
        if tasks is None:
            return cls.model_validate(doc)
        return cls.model_validate({**doc, "tasks": _TASKS.validate_json(unpack(tasks))})


class JobRecord(_Record):
    id: str = Field(alias="_id")
    user: str
    name: str
    virtual_cluster: str
    config: JobConfig
    raw_config: dict[str, Any]
    warnings: tuple[str, ...] = ()
    state: JobState = JobState.WAITING
    sub_state: SubState = SubState.QUEUED
    reason: str = ""
    created_ms: int
    launched_ms: int | None = None
    completed_ms: int | None = None
    attempt: int = 0
    retries: int = 0
    tasks: tuple[TaskRecord, ...] = ()
    exit_code: int | None = None
    exit_reason: str = ""
    exit_diagnostics: str = ""
    trigger_role: str | None = None
    trigger_index: int | None = None
    stop_requested_by: str | None = None
    delete_requested: bool = False
    # Set by the scheduler when it preempts the job's current attempt (see PreemptedBy); cleared when the
    # next attempt is queued. ``preempted_by``: the jobs that preempted it (and theirs), never preempted
    # back by it.
    preempted: PreemptedBy | None = None
    preempted_by: tuple[str, ...] = ()
    # Optimistic concurrency: every write bumps it; the status service writes only over the version it read.
    version: int = 0
    # Attempts ended by this change, for the store to archive in ``job_attempts`` (never kept in the job
    # document, so a job retried often stays small; ``Store.attempts_of`` reads them back).
    archived: tuple[AttemptRecord, ...] = ()
    retry_counts: RetryCounts = RetryCounts()
    retry_at_ms: int | None = None
    # Attempts in a row that ended within the retry backoff's cap of their launch: the exponent of the
    # next retry's delay. An attempt that ran longer resets it (shared.lifecycle.transitions.RetryPolicy).
    backoff_streak: int = 0
    # Attempts in a row that ended because the engine could not start a task's container, with the same
    # error each time (the last one's is ``exit_reason``); at a bound the job fails instead of retrying
    # (shared.lifecycle.transitions.RetryPolicy.max_start_failures).
    start_failures: int = 0
    queued_ms: int | None = None  # when the current attempt joined the queue (created_ms for the first)
    placement_id: str | None = None  # which scheduler commit placed the current attempt
    # Judged unable to start even on the idle cluster as it is: left out of the scheduler's reads (its
    # reason says why) until the cluster's nodes or quotas change. It keeps its place in the queue.
    parked: bool = False
    exit_phrase: str = ""
    exit_type: str = ""
    # Whether the job's final state is in the per-VC counters (see shared/db/tallies.py); the store sets it.
    counted: bool = False

    def to_document(self, *, packed: bool = True) -> dict[str, Any]:
        """The job as one document: a big job's configs and tasks packed (:mod:`shared.packing`;
        ``packed=False``: its plain form, which is never smaller), the fields queries read plain, with the
        derived ones (what it holds, its counts). A new job is stored as :meth:`documents`."""
        doc = self.head_document(packed=packed)
        doc.update(config_fields(self.config, self.raw_config, packed=packed))
        return doc

    def documents(self) -> tuple[dict[str, Any], dict[str, Any] | None]:
        """A new job as stored: its document, and its configs' where they are big (``PACK_MIN_BYTES`` of
        JSON), the job's then keeping their stub (:func:`config_stub`) and ``configs_apart``.

        Why apart: the embedded SecantusDB decodes every document a read touches whole, so a list window,
        the queue's projection and every update of a job with a megabyte of ``extras`` that zlib cannot
        shrink (random text: packed, still 0.8 MB) cost the database's only core about a millisecond per
        job; a list page waited 50-150 ms behind a burst of them (issue 24, tests/benchmarks/worst_job.py).
        The configs never change, so their document is written once and read only with the whole job."""
        apart = apart_configs(self.config, self.raw_config)
        if apart is None:
            return self.to_document(), None
        doc = self.head_document()
        doc.update({"config": config_stub(self.config), CONFIGS_APART: True})
        return doc, {"_id": self.id, **apart}

    def head_document(self, *, packed: bool = True) -> dict[str, Any]:
        """Every field of the job's document but the configs (which never change): what a rewrite sets."""
        doc = self.model_dump(mode="json", by_alias=True, exclude={"archived", "config", "raw_config", "tasks"})
        doc.update(task_fields(self.tasks, packed=packed))
        doc.update(holding_fields(self.tasks))
        doc.update(task_count=self.config.total_tasks, gpu_count=self.config.total_gpus,
                   role_count=len(self.config.task_roles), name_keys=name_keys(self.name),
                   job_priority=written_class(self.config.extras))
        return doc

    @classmethod
    def from_document(cls, doc: dict[str, Any]) -> JobRecord:
        """A stored job, its parts packed or plain (documents of any age: a packed part wins); a job whose
        configs are apart with its configs' document merged in (:meth:`shared.db.store.Store.get_job`)."""
        configs, tasks = doc.get(PACKED_CONFIG), doc.get(PACKED_TASKS)
        if configs is None and tasks is None:
            return cls.model_validate(doc)
        doc = dict(doc)
        if configs is not None:
            doc.update(configs_whole(json.loads(unpack(configs))))
        if tasks is not None:
            doc["tasks"] = _TASKS.validate_json(unpack(tasks))
        return cls.model_validate(doc)

    def task_slot(self, role: str, index: int) -> int:
        """Position of (role, index) in ``tasks``: roles in config order, then task index."""
        for slot, t in enumerate(self.tasks):
            if t.role == role and t.index == index:
                return slot
        raise KeyError(f"{role}[{index}]")


PACKED_CONFIG = "packed_config"  # a big job's ``config`` and ``raw_config``, packed together (written once)
CONFIGS_APART = "configs_apart"  # the job's field saying its configs are in a document of their own
PACKED_TASKS = "packed_tasks"  # a big job's ``tasks``, packed (rewritten with them)
_TASKS: TypeAdapter[tuple[TaskRecord, ...]] = TypeAdapter(tuple[TaskRecord, ...])


def config_fields(config: JobConfig, raw: dict[str, Any], *, packed: bool = True) -> dict[str, Any]:
    """The document's fields for the job's two configs: plain, or packed beside :func:`config_stub`."""
    plain = {"config": config.model_dump(mode="json", by_alias=True), "raw_config": raw}
    if not packed:
        return plain
    text = json.dumps(configs_once(plain), separators=(",", ":"), ensure_ascii=False).encode()
    blob = pack(text, lambda: bson_bytes(plain))
    return plain if blob is None else {PACKED_CONFIG: blob, "config": config_stub(config)}


def apart_configs(config: JobConfig, raw: dict[str, Any]) -> dict[str, Any] | None:
    """The fields of a document of their own for the job's two configs (packed, or plain where zlib cannot
    shrink them), or None where they are small enough to stay in the job's document."""
    plain = {"config": config.model_dump(mode="json", by_alias=True), "raw_config": raw}
    text = json.dumps(configs_once(plain), separators=(",", ":"), ensure_ascii=False).encode()
    if len(text) < PACK_MIN_BYTES:
        return None
    blob = pack(text, lambda: bson_bytes(plain))
    return plain if blob is None else {PACKED_CONFIG: blob}


def config_stub(config: JobConfig) -> dict[str, Any]:
    """What a packed job keeps of its config in plain sight: the one field a query projects (the queue's
    priority class), as the class it stands for (so a read of the stub finds the class the config has)."""
    *path, last = FIELD_PATH.split(".")
    stub: dict[str, Any] = {last: priority_class_of(config).value}
    for key in reversed(path):
        stub = {key: stub}
    return stub


def task_fields(tasks: tuple[TaskRecord, ...], *, packed: bool = True) -> dict[str, Any]:
    """The document's field for the job's tasks: ``tasks`` plain, or ``packed_tasks``."""
    def plain() -> dict[str, Any]:
        return {"tasks": [t.model_dump(mode="json") for t in tasks]}

    blob = pack(_TASKS.dump_json(tasks), lambda: bson_bytes(plain())) if packed else None
    return plain() if blob is None else {PACKED_TASKS: blob}


def tasks_update(tasks: Iterable[TaskRecord | Mapping[str, Any]]) -> tuple[dict[str, Any], dict[str, Any]]:
    """An update's ``$set`` and ``$unset`` that write the job's tasks (records, or records as dumped) in
    place: the field of :func:`task_fields`, the other form unset (a document written plain before)."""
    written = task_fields(_TASKS.validate_python(tuple(tasks)))
    return written, {field: "" for field in ("tasks", PACKED_TASKS) if field not in written}


def holds_resources(task: TaskRecord) -> bool:
    """The one definition of what holds a node's resources: a placed task that has not ended (a final
    job's leftover tasks included, until their containers are really gone)."""
    return task.node_id is not None and not task.state.is_final


class Holding(NamedTuple):
    """A task that holds resources, with what it holds: its role's CPUs and memory, its GPUs and ports."""

    job: JobRecord
    task: TaskRecord
    role: TaskRole


def holdings(jobs: Iterable[JobRecord]) -> Iterator[Holding]:
    """Every task of ``jobs`` that holds resources (:func:`holds_resources`), with its role: what the
    scheduler subtracts from nodes (``ClusterSnapshot.build``) and counts against quotas (``usage_by_vc``)."""
    for job in jobs:
        roles = {r.name: r for r in job.config.task_roles}
        for task in job.tasks:
            role = roles.get(task.role)
            if role is not None and holds_resources(task):
                yield Holding(job, task, role)


def holding_fields(tasks: Iterable[TaskRecord]) -> dict[str, Any]:
    """The indexed fields a job document carries so that active work is found without reading history:
    ``holds`` (a task holds resources) and ``hold_nodes`` (the nodes they are on)."""
    nodes = sorted({str(t.node_id) for t in tasks if holds_resources(t)})
    return {"holds": bool(nodes), "hold_nodes": nodes}


def initial_tasks(config: JobConfig) -> tuple[TaskRecord, ...]:
    return tuple(
        TaskRecord(role=role.name, index=i) for role in config.task_roles for i in range(role.task_number)
    )


class GpuInfo(_Record):
    index: int
    type: str  # the gpuType jobs ask for ("V100"): declared (PAIQ_NODE_GPUS) or mapped from the model
    uuid: str = ""  # what NVML reports of the device, when it was found ("" for a declaration alone)
    model: str = ""  # NVML's device name ("NVIDIA H100 80GB HBM3")
    memory_mb: int = 0


class NodeRecord(_Record):
    id: str = Field(alias="_id")
    ip: str
    cpus: int
    memory_mb: int
    gpus: tuple[GpuInfo, ...] = ()
    port_range: tuple[int, int]
    labels: dict[str, str] = Field(default_factory=dict)
    heartbeat_ms: int = 0
    lost: bool = False

    def to_document(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True)
