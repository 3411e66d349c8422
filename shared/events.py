"""The events paiq services exchange, as CloudEvents 1.0 structured JSON.

Each event type is a frozen pydantic model whose ``type`` is a literal; :data:`Event` is their
discriminated union. An event serialises to exactly the CloudEvents envelope (``specversion``, ``id``,
``source``, ``type``, ``time``, ``subject`` = job id, ``datacontenttype``, ``data``), so CloudEvents
tooling reads it. The routing key on the ``paiq.events`` exchange is the type, except for commands to
one node (``node.<node_id>.<verb>``).
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from shared.records import JobState, TaskSpec, TaskSubState
from shared.taskref import TaskRef


def _now() -> datetime:
    return datetime.now(UTC)


def _new_id() -> str:
    return uuid.uuid4().hex


class _Data(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class CloudEvent(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    specversion: Literal["1.0"] = "1.0"
    id: str = Field(default_factory=_new_id)
    source: str = "paiq"
    time: datetime = Field(default_factory=_now)
    subject: str = ""
    datacontenttype: Literal["application/json"] = "application/json"

    @property
    def routing_key(self) -> str:
        key: str = getattr(self, "type")  # noqa: B009 - every concrete event declares a literal type
        return key


# --- job lifecycle ---------------------------------------------------------------------------


class JobSubmittedData(_Data):
    job_id: str
    user: str
    virtual_cluster: str


class JobSubmitted(CloudEvent):
    """A job was accepted and stored WAITING; the scheduler should try to place it."""

    type: Literal["job.submitted"] = "job.submitted"
    data: JobSubmittedData


class PlacedTask(_Data):
    role: str
    index: int
    node_id: str
    ip: str
    gpus: tuple[int, ...] = ()
    ports: dict[str, tuple[int, ...]] = Field(default_factory=dict)


class JobScheduledData(_Data):
    job_id: str
    attempt: int
    tasks: tuple[PlacedTask, ...]


class JobScheduled(CloudEvent):
    """Every task of the job has a node, GPUs and ports; launch commands went to the nodes."""

    type: Literal["job.scheduled"] = "job.scheduled"
    data: JobScheduledData


class JobWaitingData(_Data):
    job_id: str
    reason: str


class JobWaiting(CloudEvent):
    """The job does not fit now; ``reason`` says why (first time, or when the reason changes)."""

    type: Literal["job.waiting"] = "job.waiting"
    data: JobWaitingData


class JobCompletedData(_Data):
    job_id: str
    attempt: int
    state: JobState
    exit_code: int | None = None
    reason: str = ""
    trigger_role: str | None = None
    trigger_index: int | None = None


class JobCompleted(CloudEvent):
    """The job reached a final state (SUCCEEDED, FAILED or STOPPED) with its exit code and reason; its
    leftover tasks are then stopped, and their resources freed once they have ended."""

    type: Literal["job.completed"] = "job.completed"
    data: JobCompletedData


class JobRetryingData(_Data):
    job_id: str
    attempt: int
    exit_code: int
    reason: str
    counter: Literal["user", "platform", "resource"]
    retry_at_ms: int


class JobRetrying(CloudEvent):
    """An attempt ended (failed, or ended any way with retryCount -2) and the retry policy gives the job
    another; the job is WAITING ("retry pending") until ``retry_at_ms`` and until every task of the
    ended attempt has ended."""

    type: Literal["job.retrying"] = "job.retrying"
    data: JobRetryingData


class JobRequeuedData(_Data):
    job_id: str
    attempt: int


class JobRequeued(CloudEvent):
    """A new attempt of the job is queued for placement (after a retry delay)."""

    type: Literal["job.requeued"] = "job.requeued"
    data: JobRequeuedData


class JobPreemptedData(_Data):
    job_id: str  # the job stopped
    attempt: int  # its attempt that ends
    virtual_cluster: str
    by_job_id: str  # the waiting job it makes room for
    by_virtual_cluster: str
    by_priority: str  # the waiting job's priority class
    reason: str  # why it was chosen ("borrowed capacity of vc a", "priority test < prod in vc a")


class JobPreempted(CloudEvent):
    """The scheduler stops the job's attempt to make room for a waiting job: of higher priority in the same
    VC, taking back capacity its VC lent, or any job when this one is opportunistic. The attempt ends as a
    platform failure (exit -1004, not counted against retryCount) and is queued again with its age."""

    type: Literal["job.preempted"] = "job.preempted"
    data: JobPreemptedData


class JobStopRequestedData(_Data):
    job_id: str
    by: str


class JobStopRequested(CloudEvent):
    """A user or admin asked to stop the job."""

    type: Literal["job.stop_requested"] = "job.stop_requested"
    data: JobStopRequestedData


# --- tasks -----------------------------------------------------------------------------------


class LaunchTasksData(_Data):
    job_id: str
    attempt: int
    node_id: str
    tasks: tuple[TaskSpec, ...]
    # Empty from a scheduler that sent each task's whole environment in its env (the same rule serves).
    job_env: dict[str, str] = Field(default_factory=dict)


class LaunchTasks(CloudEvent):
    """Command to one node's launcher: start these tasks. ``job_env`` holds, once, the variables every task
    of the job shares (the job's, every role's hosts and ports, jobEnvs); each task's ``env`` only its own.
    A task runs with ``job_env``, its ``env`` over it."""

    type: Literal["node.launch"] = "node.launch"
    data: LaunchTasksData

    @property
    def routing_key(self) -> str:
        return f"node.{self.data.node_id}.launch"


class StopTasksData(_Data):
    job_id: str
    attempt: int | None  # None: every attempt's (the job is over); else only that failed attempt's
    node_id: str
    by_user: bool = False  # the job was stopped by its user: its tasks' exits say -210
    reason: str = ""


class StopTasks(CloudEvent):
    """Command to one node's launcher: stop the job's containers still on it (SIGTERM, then SIGKILL after
    the grace period). Sent only to the nodes that hold the job's tasks, when the job ends or an attempt
    fails; each launcher's own reconcile also stops what is left of a job that is over."""

    type: Literal["node.stop"] = "node.stop"
    data: StopTasksData

    @property
    def routing_key(self) -> str:
        return f"node.{self.data.node_id}.stop"


class RelaunchTaskData(_Data, TaskRef):
    node_id: str  # the node the task holds (its placement is kept)
    reason: str = ""  # why it runs again, in words (its earlier run's exit)


class RelaunchTask(CloudEvent):
    """Command to one node's launcher: run this task again, as run ``task_attempt`` of it, on the node it
    holds, with the environment of its launch (protocol v2's ``taskRetryCount``: its earlier run failed and
    it has retries left). The launcher rebuilds the spec from the job as stored; its reconcile pass does
    the same for a command that was lost."""

    type: Literal["node.relaunch"] = "node.relaunch"
    data: RelaunchTaskData

    @property
    def routing_key(self) -> str:
        return f"node.{self.data.node_id}.relaunch"


class TaskStartedData(_Data, TaskRef):
    node_id: str
    container_id: str


class TaskStarted(CloudEvent):
    """A task's container runs (``container_id``); the job is RUNNING from its first task on."""

    type: Literal["task.started"] = "task.started"
    data: TaskStartedData


class TaskExitedData(_Data, TaskRef):
    node_id: str
    exit_code: int
    reason: str = ""
    diagnostics: str = ""
    container_id: str | None = None


class TaskExited(CloudEvent):
    """A task's container ended (or could never start); ``exit_code`` follows OpenPAI's exit spec."""

    type: Literal["task.exited"] = "task.exited"
    data: TaskExitedData


class TaskProgressData(_Data, TaskRef):
    node_id: str
    sub_state: TaskSubState
    detail: str = ""
    kept_until_ms: int | None = None


class TaskProgress(CloudEvent):
    """What a task not yet ended is doing now, beyond its state: ``pulling image`` while its node pulls
    the image; ``kept for debugging`` (until ``kept_until_ms``) when an isDebug task's command failed."""

    type: Literal["task.progress"] = "task.progress"
    data: TaskProgressData


class TaskGpuIdleData(_Data, TaskRef):
    node_id: str
    user: str
    virtual_cluster: str
    gpus: tuple[int, ...]  # the node's GPU indices the task holds
    idle_since_ms: int
    idle_seconds: int
    peak_percent: float  # the highest utilisation seen since
    below_percent: float  # the threshold (PAIQ_GPU_IDLE_PERCENT)


class TaskGpuIdle(CloudEvent):
    """A task has held GPUs whose utilisation stayed under ``below_percent`` for ``idle_seconds``
    (PAIQ_GPU_IDLE_SECONDS): published once per idle stretch, by the launcher that samples it."""

    type: Literal["task.gpu_idle"] = "task.gpu_idle"
    data: TaskGpuIdleData


# --- nodes -----------------------------------------------------------------------------------


class NodeRegisteredData(_Data):
    node_id: str


class NodeRegistered(CloudEvent):
    """A launcher agent (re)registered its node: capacity may have changed."""

    type: Literal["node.registered"] = "node.registered"
    data: NodeRegisteredData


# --- notifications ---------------------------------------------------------------------------


class SubscriptionsChangedData(_Data):
    owner: str  # whose subscriptions (or e-mail address) changed; "" for the platform's webhooks


class SubscriptionsChanged(CloudEvent):
    """A user's notification subscriptions or e-mail address changed (or the platform's webhooks): the
    notify service reads them again instead of from its cache."""

    type: Literal["notify.subscriptions_changed"] = "notify.subscriptions_changed"
    data: SubscriptionsChangedData


# --- the journal (shared.db.journal, shared.runtime.relay) -------------------------------------------


class JournalWrittenData(_Data):
    pass


class JournalWritten(CloudEvent):
    """A process stored events in the journal: the process numbering it (the lease ``journal``) takes them
    now rather than at its next look (non-durable, a wake-up only)."""

    type: Literal["journal.written"] = "journal.written"
    data: JournalWrittenData = Field(default_factory=JournalWrittenData)


class JournalNumberedData(_Data):
    last: int  # the last number given


class JournalNumbered(CloudEvent):
    """The journal's entries are numbered through ``last`` and published: readers in every process (the live
    feed, the notifier) read on (non-durable, a wake-up only)."""

    type: Literal["journal.numbered"] = "journal.numbered"
    data: JournalNumberedData


Event = Annotated[
    JobSubmitted | JobScheduled | JobWaiting | JobCompleted | JobRetrying | JobRequeued | JobStopRequested
    | JobPreempted
    | LaunchTasks | StopTasks | RelaunchTask
    | TaskStarted | TaskExited | TaskProgress | TaskGpuIdle | NodeRegistered
    | SubscriptionsChanged | JournalWritten | JournalNumbered,
    Field(discriminator="type"),
]

EVENT_ADAPTER: TypeAdapter[Event] = TypeAdapter(Event)


def parse_event(body: bytes | str) -> Event:
    """Parse one CloudEvents JSON document (raises pydantic.ValidationError when it is not one)."""
    return EVENT_ADAPTER.validate_json(body)


def dump_event(event: CloudEvent) -> bytes:
    """The event as CloudEvents structured JSON. ``subject``, when present, must not be empty (CloudEvents
    1.0): an event about no job (a node's) goes without one, and is parsed back with ``""``."""
    return event.model_dump_json(exclude={"subject"} if not event.subject else None).encode()
