"""What the REST API answers, as models: the OpenAPI document's response schemas are generated from them
(:mod:`services.submit.openapi`), and every handler answers through :func:`answer`, so no handler can send
a shape the document does not describe.

The shapes are OpenPAI v0.14's (field names in camelCase, times in ms since the epoch). A field is always
sent, ``null`` where it has no value, unless it is declared with ``exclude_if``: then it is left out when
empty, as OpenPAI left it out (a submission's ``warnings``). Fields have no defaults otherwise, so a handler
names every field it sends.
"""

from __future__ import annotations

from typing import Literal, Self

from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field, RootModel
from pydantic.alias_generators import to_camel

from services.submit.errors import Error
from shared.ops.vitals import HealthReport
from shared.records import JobState, SubState, TaskState, TaskSubState
from shared.scheduling.vclusters import Quota


class Answer(BaseModel):
    """An answer's object: frozen, exact, camelCase on the wire."""

    model_config = ConfigDict(frozen=True, extra="forbid", alias_generator=to_camel, populate_by_name=True)


def _is_empty(value: object) -> bool:
    return not value


class Message(Answer):
    """A change done or under way; ``warnings``: what a submission ignored (absent when nothing was)."""

    message: str
    warnings: tuple[str, ...] = Field(default=(), exclude_if=_is_empty)


class Submitted(Answer):
    """Protocol v2's answer to a submission (OpenPAI v1.8's ``{status, message}``); ``warnings`` as v1's."""

    status: int
    message: str
    warnings: tuple[str, ...] = Field(default=(), exclude_if=_is_empty)


class Token(Answer):
    user: str
    token: str
    admin: bool


class Whoami(Answer):
    """Whose token it is (the web portal asks)."""

    user: str
    admin: bool
    groups: tuple[str, ...]


class UserExtension(Answer):
    virtual_cluster: tuple[str, ...]


class User(Answer):
    """A user as OpenPAI v0.14 answered ``GET /api/v1/user/:username`` (its v2 user model, password removed)."""

    username: str
    email: str
    grouplist: tuple[str, ...]
    extension: UserExtension
    admin: bool
    virtual_cluster: tuple[str, ...] = Field(description="the virtual clusters the user may submit to")


class SshContainer(Answer):
    id: str
    ssh_ip: str
    ssh_port: str
    task_role_name: str
    task_index: int


class KeyPair(Answer):
    folder_path: str
    public_key_file_name: str
    private_key_file_name: str
    private_key_direct_download_link: str


class SshInfo(Answer):
    containers: tuple[SshContainer, ...]
    key_pair: KeyPair


class RetryDetails(Answer):
    """Retries by whose fault: the user's (they count against retryCount), the platform's, resources'."""

    user: int
    platform: int
    resource: int


class _Progress(Answer):
    """What a job's list entry and its detail both say of it (paiq adds ``subState``, ``reason`` and
    ``queuePosition`` to OpenPAI's fields)."""

    state: JobState
    sub_state: SubState
    reason: str = Field(description="why the job waits or how it ended, in words")
    queue_position: int | None = Field(description="a queued job's place in its virtual cluster's queue")
    execution_type: Literal["START", "STOP"]
    retries: int
    retry_details: RetryDetails
    created_time: int
    completed_time: int | None
    app_exit_code: int | None
    virtual_cluster: str


class JobSummary(_Progress):
    """A job in a list."""

    name: str
    username: str
    total_gpu_number: int
    total_task_number: int
    total_task_role_number: int


class TaskStatus(Answer):
    task_index: int
    task_state: TaskState
    container_id: str | None
    container_ip: str | None
    container_node_id: str | None
    container_ports: dict[str, str] = Field(description="label -> the task's ports of it, comma-separated")
    container_gpus: str | None = Field(description="GPU indices, comma-separated; null for none")
    container_log: str
    container_exit_code: int | None
    container_exit_reason: str
    container_exit_diagnostics: str = Field(description="what the task printed last; '' but to its owner or an "
                                                        "admin")
    launched_time: int | None
    completed_time: int | None
    sub_state: TaskSubState
    container_kept_until: int | None
    retries: int = Field(description="paiq's: the task's re-runs in place in this attempt (protocol v2's "
                                     "taskRetryCount with extras.gangAllocation false); 0 for every other task")

    def without_private(self) -> Self:
        return self.model_copy(update={"container_exit_diagnostics": ""})


class AttemptTaskStatus(TaskStatus):
    task_role_name: str


class Attempt(Answer):
    """An earlier attempt of the job, as it ended."""

    attempt: int
    launched_time: int | None
    completed_time: int | None
    exit_code: int | None
    exit_phrase: str
    exit_type: str
    exit_reason: str
    trigger_task_role_name: str | None
    trigger_task_index: int | None
    task_statuses: tuple[AttemptTaskStatus, ...]


class ExitSpec(Answer):
    code: int
    phrase: str
    type: str
    reason: str


class UsagePoint(Answer):
    """What a task used over a span ending at ``time``: means over the span (older points span longer: the
    series coarsens with age), the memory's peak. null: not measured (the host network's counters are the
    node's; no GPU, or no NVML)."""

    time: int
    span_ms: int
    cpu_cores: float
    memory_bytes: int
    memory_peak_bytes: int
    network_receive_bytes_per_second: float | None
    network_transmit_bytes_per_second: float | None
    disk_read_bytes_per_second: float | None
    disk_write_bytes_per_second: float | None
    gpu_utilization: float | None = Field(description="percent, the mean over the task's GPUs")
    gpu_memory_bytes: int | None


class JobUsage(Answer):
    """An attempt's usage summed over its tasks (paiq's extension): GPU-hours held against used, the task
    closest to its memory limit, the tasks flagged for idle GPUs and what the job is warned."""

    tasks_sampled: int
    cpu_core_hours: float
    gpu_hours_held: float
    gpu_hours_used: float | None = Field(description="null when no GPU utilisation was measured")
    gpu_utilization: float | None = Field(description="percent: used / held, over the time measured")
    memory_peak_bytes: int = Field(description="the peak of the task closest to its memory limit")
    memory_limit_bytes: int
    memory_peak_task: str | None = Field(description="that task, as role[index]")
    idle_gpu_tasks: tuple[str, ...]
    warnings: tuple[str, ...]


class TaskUsage(Answer):
    """One task's profile: what it holds, its totals and its latest point."""

    task_role_name: str
    task_index: int
    task_attempt: int = Field(description="the run of the task (taskRetryCount re-runs a task in place: 0, 1, ...)")
    node_id: str
    cpu_number: int
    gpus: tuple[int, ...] = Field(description="the node's GPU indices it holds")
    memory_limit_bytes: int
    samples: int
    first_time: int | None
    last_time: int | None
    cpu_core_seconds: float
    memory_peak_bytes: int
    gpu_seconds_held: float
    gpu_seconds_used: float | None
    gpu_idle_since: int | None = Field(description="since when its GPUs stay under the idle threshold")
    gpu_idle: bool = Field(description="flagged: idle for PAIQ_GPU_IDLE_SECONDS")
    last: UsagePoint | None


class JobProfile(Answer):
    """A job attempt's profile: the tasks' summaries (no series; each task's own route has it)."""

    name: str
    attempt: int
    interval_seconds: float | None = Field(description="the sampling interval (null: nothing sampled yet)")
    usage: JobUsage
    tasks: tuple[TaskUsage, ...]


class TaskProfile(Answer):
    """One task's profile with its series, oldest point first."""

    name: str
    attempt: int
    task_attempt: int = Field(description="the run of the task answered (taskRetryCount re-runs a task in place)")
    interval_seconds: float | None
    task: TaskUsage | None = Field(description="null: not sampled yet")
    points: tuple[UsagePoint, ...]


class JobStatus(_Progress):
    username: str
    app_launched_time: int | None
    app_completed_time: int | None
    app_exit_spec: ExitSpec | None
    attempt: int
    attempts: tuple[Attempt, ...]
    retry_at: int | None
    app_exit_diagnostics: str = Field(description="what the failing task printed last; '' but to the job's owner "
                                                  "or an admin")
    app_exit_trigger_message: str
    app_exit_trigger_task_role_name: str | None
    app_exit_trigger_task_index: int | None
    usage: JobUsage | None = Field(description="paiq's extension: the current attempt's usage (null: not sampled)")


class TaskRoleName(Answer):
    name: str


class TaskRoleStatus(Answer):
    task_role_status: TaskRoleName
    task_statuses: tuple[TaskStatus, ...]


class JobDetail(Answer):
    name: str
    job_status: JobStatus
    task_roles: dict[str, TaskRoleStatus]

    def without_private(self) -> JobDetail:
        """The same answer with what a program printed (stderr tails) blanked, for anyone but its owner."""
        status = self.job_status
        attempts = tuple(a.model_copy(update={"task_statuses": tuple(t.without_private() for t in a.task_statuses)})
                         for a in status.attempts)
        roles = {name: r.model_copy(update={"task_statuses": tuple(t.without_private() for t in r.task_statuses)})
                 for name, r in self.task_roles.items()}
        return self.model_copy(update={
            "job_status": status.model_copy(update={"app_exit_diagnostics": "", "attempts": attempts}),
            "task_roles": roles})


class Resources(Answer):
    cpus: int
    memory_mb: int = Field(alias="memoryMB")
    gpus: int


class Amounts(Answer):
    """Amounts of resources that need not be whole: a share of a quota's worth of CPUs or GPUs."""

    cpus: float
    memory_mb: float = Field(alias="memoryMB")
    gpus: float


class VirtualCluster(Answer):
    """A virtual cluster: its quota (percent of the cluster), who may use it, what it may and does use, and
    what it borrows from the others' idle quota and lends them (paiq's extension)."""

    name: str
    quota: Quota
    borrowing: Quota = Field(description="how far beyond its quota it may run on the others' idle capacity "
                                         "(percent of the cluster; 0: it does not borrow)")
    users: tuple[str, ...]
    groups: tuple[str, ...]
    capacity: Resources
    used: Resources
    borrowed: Amounts = Field(description="what it runs beyond its quota now (opportunistic jobs left out)")
    lent: Amounts = Field(description="its idle quota the others' borrowing runs on now")
    jobs: dict[str, int] = Field(description="jobs in each state")


class QueuedJob(Answer):
    """A queued job in its queue's order (paiq's extension: OpenPAI had one FIFO queue per VC)."""

    position: int
    user: str
    name: str
    priority: str = Field(description="the priority class (extras.hivedScheduler.jobPriorityClass): crit, prod, "
                                      "test or oppo")
    user_share: float = Field(description="the user's dominant share of the VC's quota held by their running "
                                          "jobs (0-1), as the scheduler's last pass ordered by it")
    waiting_since: int = Field(description="when this attempt joined the queue (ms since the epoch)")
    reason: str


class Queue(Answer):
    """A virtual cluster's queue: priority first, then the users' shares, then age."""

    virtual_cluster: str
    jobs: tuple[QueuedJob, ...]


class JobList(RootModel[tuple[JobSummary, ...]]):
    """Jobs, newest first."""


class UserList(RootModel[tuple[User, ...]]):
    """Users, by name."""


class VirtualClusters(RootModel[dict[str, VirtualCluster]]):
    """Virtual clusters by name."""


# Every answer model: the document's components are generated from these (services.submit.openapi).
ANSWERS: tuple[type[BaseModel], ...] = (Error, Message, Submitted, Token, Whoami, User, UserList, SshInfo, JobSummary,
                                        JobList, JobDetail, VirtualCluster, VirtualClusters, Queue, HealthReport,
                                        JobProfile, TaskProfile)


# What a handler may answer with (an error leaves as ApiError.response(), health as shared.ops.metrics'
# health_response(), the job config as it was submitted).
Body = Answer | JobList | UserList | VirtualClusters


def answer(body: Body, *, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    """The one way a handler answers JSON: the model, as the document describes it."""
    return web.json_response(body.model_dump(mode="json", by_alias=True), status=status, headers=headers)
