"""OpenPAI v1.8's ``/api/v2/jobs`` answers (``models/v2/job/k8s.js``: ``convertFrameworkSummary``,
``convertFrameworkDetail``, ``convertTaskDetail``; ``models/v2/utils/frameworkConverter.js``:
``convertToJobAttempt``), with OpenPAI's keys and types. paiq's values where OpenPAI's came from Kubernetes:
``debugId`` the job's id, ``subState`` paiq's sub-state, ``jobPriority`` in the list the class the config
wrote (``extras.hivedScheduler.jobPriorityClass``, null when none, as v1.8's database kept it) and null in a
job's detail and attempts (v1.8 read it off the framework's snapshot, which has no such field),
``retryDelayTime`` null, ``appId`` the job's id and attempt, ``containerId`` the container's id,
``containerNodeName`` the node's id, ``attemptId`` of a task the job's attempt (the log routes name a task's
log by it; ``retries`` and ``accountableRetries`` count its re-runs in place, taskRetryCount).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field, RootModel
from pydantic.json_schema import JsonSchemaMode, models_json_schema

from services.submit.contract.answers import Answer, ExitSpec, RetryDetails
from services.submit.contract.configschema import REF
from services.submit.contract.requests import Request
from shared.db.tags import MAX_TAG_CHARS


class V2JobSummary(Answer):
    """A job in ``GET /api/v2/jobs``."""

    debug_id: str
    name: str
    username: str
    state: str
    sub_state: str
    execution_type: str
    tags: tuple[str, ...]
    retries: int
    retry_details: RetryDetails
    retry_delay_time: int | None
    submission_time: int
    created_time: int | None
    launched_time: int | None
    completed_time: int | None
    app_exit_code: int | None
    virtual_cluster: str
    total_gpu_number: int
    total_task_number: int
    total_task_role_number: int
    job_priority: str | None


class V2JobList(RootModel[tuple[V2JobSummary, ...]]):
    """``GET /api/v2/jobs`` without ``withTotalCount``: the page."""


class V2JobPage(Answer):
    """``GET /api/v2/jobs?withTotalCount=true``: the page and how many jobs the list holds."""

    total_count: int = Field(description="exact where a counter covers the filters (none, username, state, vc, "
                                         "vc with state); otherwise a lower bound: the jobs up to this page, "
                                         "plus one when more follow")
    data: tuple[V2JobSummary, ...]


class V2TaskStatus(Answer):
    task_index: int
    task_uid: str
    task_state: str
    container_id: str | None
    container_ip: str | None
    container_node_name: str | None
    container_ports: dict[str, str]
    container_gpus: int | None = Field(description="a bitmask of the GPUs the task holds (OpenPAI's form)")
    container_log: str
    container_exit_code: int | None
    container_exit_spec: ExitSpec | None
    container_exit_diagnostics: str | None
    retries: int
    accountable_retries: int
    created_time: int | None
    launched_time: int | None
    completed_time: int | None
    attempt_id: int
    attempt_state: str
    current_attempt_created_time: int | None
    current_attempt_launched_time: int | None
    current_attempt_completed_time: int | None


class V2TaskRoleName(Answer):
    name: str


class V2TaskRole(Answer):
    task_role_status: V2TaskRoleName
    task_statuses: tuple[V2TaskStatus, ...]


class V2ExitMessages(Answer):
    container: str | None
    runtime: str | None
    launcher: str | None


class V2JobStatus(Answer):
    username: str
    state: str
    sub_state: str
    execution_type: str
    retries: int
    retry_details: RetryDetails
    retry_delay_time: int | None
    created_time: int | None
    launched_time: int | None
    completed_time: int | None
    attempt_id: int
    attempt_state: str
    app_id: str
    app_progress: int
    app_tracking_url: str
    app_created_time: int | None
    app_launched_time: int | None
    app_completed_time: int | None
    app_exit_code: int | None
    app_exit_spec: ExitSpec | None
    app_exit_diagnostics: str | None
    app_exit_messages: V2ExitMessages | None
    app_exit_trigger_message: str | None
    app_exit_trigger_task_role_name: str | None
    app_exit_trigger_task_index: int | None
    app_exit_type: str | None
    virtual_cluster: str
    submission_time: int


class V2JobDetail(Answer):
    """``GET /api/v2/jobs/{user}~{job}`` (and ``/attempts/{attemptId}``): the job and one attempt's tasks."""

    debug_id: str
    name: str
    tags: tuple[str, ...]
    job_priority: str | None
    job_status: V2JobStatus
    task_roles: dict[str, V2TaskRole]
    # paiq's own key: where the tensorboard runtime plugin's server answers (OpenPAI's portal worked it out
    # from the first task's ports); null without the plugin or before that task is placed
    tensorboard_address: str | None = None


class V2JobAttempt(Answer):
    """One attempt of a job (``GET /api/v2/jobs/{user}~{job}/job-attempts[/{attemptIndex}]``)."""

    job_name: str
    framework_name: str
    uid: str
    user_name: str
    state: str
    origin_state: str
    attempt_index: int
    job_started_time: int
    attempt_started_time: int | None
    attempt_completed_time: int | None
    exit_code: int | None
    exit_phrase: str | None
    exit_type: str | None
    exit_diagnostics: str | None
    app_exit_trigger_message: str | None
    app_exit_trigger_task_role_name: str | None
    app_exit_trigger_task_index: int | None
    app_exit_spec: ExitSpec | None
    app_exit_diagnostics: str | None
    app_exit_messages: V2ExitMessages | None
    total_gpu_number: int
    total_task_number: int
    total_task_role_number: int
    job_priority: str | None
    task_roles: dict[str, V2TaskRole]
    is_latest: bool


class V2JobAttempts(RootModel[tuple[V2JobAttempt, ...]]):
    """Every attempt of a job, oldest first; the current one ``isLatest``."""


class V2TaskAttempt(Answer):
    attempt_id: int
    attempt_state: str
    current_attempt_created_time: int | None
    current_attempt_launched_time: int | None
    current_attempt_completed_time: int | None
    container_id: str | None
    container_ip: str | None
    container_node_name: str | None
    container_ports: dict[str, str]
    container_gpus: int | None
    container_log: str
    container_exit_code: int | None
    container_exit_spec: ExitSpec | None
    container_exit_diagnostics: str | None


class V2TaskAttempts(Answer):
    """``GET .../attempts/{jobAttemptId}/taskRoles/{role}/taskIndex/{index}/attempts`` (``models/v2/task.js``,
    ``convertToTaskDetail``): a task of one job attempt and its attempts, latest first (a task attempt is one run
    of the task: taskRetryCount re-runs a task in place, each run a task attempt of its own)."""

    username: str
    job_name: str
    job_attempt_id: int
    task_role_name: str
    task_index: int
    task_uid: str
    task_state: str
    retries: int
    accountable_retries: int
    created_time: int | None
    launched_time: int | None
    completed_time: int | None
    attempts: tuple[V2TaskAttempt, ...]




class V2TagChange(Request):
    """``PUT``/``DELETE /api/v2/jobs/{user}~{job}/tag`` (``config/v2/tag.js``): a tag, without ``,``."""

    value: str = Field(min_length=1, max_length=MAX_TAG_CHARS, pattern=r"^[^,]+$")


class V2LogLocation(Answer):
    name: str
    uri: str


class V2LogList(Answer):
    """``GET .../attempts/{taskAttemptId}/logs``: where each of the task's logs is read."""

    locations: tuple[V2LogLocation, ...]


class V2JobEvent(Answer):
    """An event of the job (OpenPAI v1.8 stored Kubernetes' events of its pods; paiq derives them from the job's
    record: a task placed, started, ended, and why a job waits)."""

    uid: str
    framework_name: str
    pod_uid: str | None
    taskrole_name: str | None
    task_name: str | None
    task_index: int | None
    type: str = Field(description="Normal or Warning")
    reason: str
    message: str
    first_timestamp: str | None
    last_timestamp: str | None
    count: int
    source_component: str
    source_host: str | None


class V2JobEvents(Answer):
    """``GET /api/v2/jobs/{user}~{job}/events[?type=]``: newest first."""

    total_count: int
    data: tuple[V2JobEvent, ...]


V2_JOB_ANSWERS = (V2JobEvents, V2JobList, V2JobPage, V2JobDetail, V2JobAttempts, V2JobAttempt, V2TaskAttempts,
                  V2LogList)
V2_JOB_REQUESTS = (V2TagChange,)


def v2_job_schemas() -> dict[str, Any]:
    """The component schemas of these answers and requests (the OpenAPI document adds them to its own)."""
    modes: list[tuple[type[BaseModel], JsonSchemaMode]] = [(m, "serialization") for m in V2_JOB_ANSWERS]
    modes += [(m, "validation") for m in V2_JOB_REQUESTS]
    _, generated = models_json_schema(modes, by_alias=True, ref_template=REF)
    schemas: dict[str, Any] = generated["$defs"]
    return schemas
