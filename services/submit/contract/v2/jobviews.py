"""Jobs rendered in OpenPAI v1.8's ``/api/v2/jobs`` shapes (:mod:`services.submit.contract.v2.jobs`): pure
functions of the stored records, the attempt asked for picked by the caller."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from services.submit.contract.answers import ExitSpec, RetryDetails
from services.submit.contract.v2.jobs import (
    V2ExitMessages,
    V2JobAttempt,
    V2JobDetail,
    V2JobEvent,
    V2JobEvents,
    V2JobStatus,
    V2JobSummary,
    V2TaskAttempt,
    V2TaskAttempts,
    V2TaskRole,
    V2TaskRoleName,
    V2TaskStatus,
)
from shared.db.lists.paging import JobSummary
from shared.db.logs import RunPhase, TaskRun
from shared.records import AttemptRecord, JobRecord, TaskRecord
from shared.tasks.plugins import job_tensorboard_address

V2_JOB_PATH = "/api/v2/jobs/{user}~{job}"


def framework_name(user: str, job: str) -> str:
    return f"{user}~{job}"


def _execution_type(stop_requested_by: str | None) -> str:
    return "STOP" if stop_requested_by else "START"


def _retry_details(job: JobRecord | JobSummary) -> RetryDetails:
    c = job.retry_counts
    return RetryDetails(user=c.user, platform=c.platform, resource=c.resource)


def v2_summary(job: JobSummary) -> V2JobSummary:
    return V2JobSummary(
        debug_id=job.id, name=job.name, username=job.user, state=job.state.value, sub_state=job.sub_state.value,
        execution_type=_execution_type(job.stop_requested_by), tags=job.tags, retries=job.retries,
        retry_details=_retry_details(job), retry_delay_time=None, submission_time=job.created_ms,
        created_time=job.created_ms, launched_time=job.launched_ms, completed_time=job.completed_ms,
        app_exit_code=job.exit_code, virtual_cluster=job.virtual_cluster, total_gpu_number=job.gpu_count,
        total_task_number=job.task_count, total_task_role_number=job.role_count, job_priority=job.job_priority)


@dataclass(frozen=True)
class AttemptView:
    """One attempt of a job as the v2 answers show it: the current one (from the job) or an earlier one."""

    attempt: int
    tasks: tuple[TaskRecord, ...]
    launched_ms: int | None
    completed_ms: int | None
    exit_code: int | None
    exit_phrase: str
    exit_type: str
    exit_reason: str
    diagnostics: str
    trigger_role: str | None
    trigger_index: int | None
    state: str
    latest: bool


def current_attempt(job: JobRecord) -> AttemptView:
    return AttemptView(job.attempt, job.tasks, job.launched_ms, job.completed_ms, job.exit_code, job.exit_phrase,
                       job.exit_type, job.exit_reason, job.exit_diagnostics, job.trigger_role, job.trigger_index,
                       job.state.value, True)


def earlier_attempt(a: AttemptRecord) -> AttemptView:
    state = "SUCCEEDED" if a.exit_code == 0 else "FAILED"  # an earlier attempt ended and was retried
    return AttemptView(a.attempt, a.tasks, a.launched_ms, a.completed_ms, a.exit_code, a.exit_phrase, a.exit_type,
                       a.exit_reason, "", a.trigger_role, a.trigger_index, state, False)


def all_attempts(job: JobRecord, earlier: Sequence[AttemptRecord]) -> list[AttemptView]:
    """Every attempt, oldest first, the current one last."""
    return [*(earlier_attempt(a) for a in earlier if a.attempt < job.attempt), current_attempt(job)]


def _exit_spec(a: AttemptView) -> ExitSpec | None:
    if a.exit_code is None:
        return None
    return ExitSpec(code=a.exit_code, phrase=a.exit_phrase, type=a.exit_type, reason=a.exit_reason)


def _messages(a: AttemptView) -> V2ExitMessages | None:
    return V2ExitMessages(container=None, runtime=a.diagnostics or None, launcher=a.exit_reason or None) \
        if a.exit_code is not None else None


def log_path(job: JobRecord, attempt: int, task: TaskRecord, run: int) -> str:
    """Where the log list of run ``run`` of ``task`` of job attempt ``attempt`` is (v1.8's ``containerLog``)."""
    return (f"/api/v2/jobs/{framework_name(job.user, job.name)}/attempts/{attempt}/taskRoles/{task.role}"
            f"/taskIndex/{task.index}/attempts/{run}/logs")


def _task_exit(task: TaskRecord) -> ExitSpec | None:
    if task.exit_code is None:
        return None
    return ExitSpec(code=task.exit_code, phrase="", type="", reason=task.reason)


def _gpus(task: TaskRecord) -> int | None:
    return sum(1 << g for g in task.gpus) if task.gpus else None


def _ports(task: TaskRecord) -> dict[str, str]:
    return {label: ",".join(map(str, ps)) for label, ps in task.ports.items()}


def task_attempt(job: JobRecord, attempt: int, task: TaskRecord, private: bool) -> V2TaskAttempt:
    """The task's last run in job attempt ``attempt`` (its current one), as the job's record has it: v1.8's
    task ``attemptStatus``, whose ``id`` is frameworkcontroller's task attempt (``FC_TASK_ATTEMPT_ID``)."""
    return V2TaskAttempt(
        attempt_id=task.retries, attempt_state=task.state.value, current_attempt_created_time=task.started_ms,
        current_attempt_launched_time=task.started_ms, current_attempt_completed_time=task.completed_ms,
        container_id=task.container_id, container_ip=task.ip, container_node_name=task.node_id,
        container_ports=_ports(task), container_gpus=_gpus(task),
        container_log=log_path(job, attempt, task, task.retries),
        container_exit_code=task.exit_code, container_exit_spec=_task_exit(task),
        container_exit_diagnostics=(task.diagnostics or None) if private else None)


def _run_state(run: TaskRun) -> str:
    """An earlier run's state as v1.8's ``convertAttemptState`` said a completed task attempt's."""
    if run.exit_code is None:
        return "RUNNING" if run.phase == RunPhase.RUNNING else "WAITING"
    return "SUCCEEDED" if run.exit_code == 0 else "FAILED"


def earlier_run(job: JobRecord, attempt: int, task: TaskRecord, run: TaskRun, private: bool) -> V2TaskAttempt:
    """One of the task's earlier runs in job attempt ``attempt`` (re-run in place: taskRetryCount), as its
    launcher recorded it (``task_runs``): its own container, exit and times; the node, address, ports and
    GPUs are the task's (a re-run keeps its placement). v1.8 read these from its TaskHistory table."""
    exit_spec = None if run.exit_code is None else ExitSpec(code=run.exit_code, phrase="", type="", reason=run.reason)
    return V2TaskAttempt(
        attempt_id=run.task_attempt, attempt_state=_run_state(run), current_attempt_created_time=run.claimed_ms or None,
        current_attempt_launched_time=run.started_ms or run.ended_ms, current_attempt_completed_time=run.ended_ms,
        container_id=run.container_id, container_ip=task.ip, container_node_name=run.node_id,
        container_ports=_ports(task), container_gpus=_gpus(task),
        container_log=log_path(job, attempt, task, run.task_attempt), container_exit_code=run.exit_code,
        container_exit_spec=exit_spec, container_exit_diagnostics=(run.diagnostics or None) if private else None)


def task_status(job: JobRecord, attempt: int, task: TaskRecord, private: bool) -> V2TaskStatus:
    one = task_attempt(job, attempt, task, private)
    return V2TaskStatus(
        task_index=task.index, task_uid=f"{job.id}/{task.role}/{task.index}", task_state=task.state.value,
        container_id=one.container_id, container_ip=one.container_ip, container_node_name=one.container_node_name,
        container_ports=one.container_ports, container_gpus=one.container_gpus, container_log=one.container_log,
        container_exit_code=one.container_exit_code, container_exit_spec=one.container_exit_spec,
        container_exit_diagnostics=one.container_exit_diagnostics, retries=task.retries,
        accountable_retries=task.accountable_retries,
        created_time=task.started_ms, launched_time=task.started_ms, completed_time=task.completed_ms,
        attempt_id=one.attempt_id, attempt_state=task.state.value, current_attempt_created_time=task.started_ms,
        current_attempt_launched_time=task.started_ms, current_attempt_completed_time=task.completed_ms)


def _roles(job: JobRecord, a: AttemptView, private: bool) -> dict[str, V2TaskRole]:
    return {role.name: V2TaskRole(task_role_status=V2TaskRoleName(name=role.name),
                                  task_statuses=tuple(task_status(job, a.attempt, t, private)
                                                      for t in a.tasks if t.role == role.name))
            for role in job.config.task_roles}


def v2_detail(job: JobRecord, a: AttemptView, tags: tuple[str, ...], *, private: bool) -> V2JobDetail:
    """The job with attempt ``a``'s tasks; what programs printed only where ``private`` (owner, admin)."""
    status = V2JobStatus(
        username=job.user, state=job.state.value, sub_state=job.sub_state.value,
        execution_type=_execution_type(job.stop_requested_by), retries=job.retries,
        retry_details=_retry_details(job), retry_delay_time=None, created_time=job.created_ms,
        launched_time=job.launched_ms, completed_time=job.completed_ms, attempt_id=a.attempt, attempt_state=a.state,
        app_id=f"{job.id}-{a.attempt}", app_progress=1 if a.exit_code is not None else 0, app_tracking_url="",
        app_created_time=a.launched_ms, app_launched_time=a.launched_ms, app_completed_time=a.completed_ms,
        app_exit_code=a.exit_code, app_exit_spec=_exit_spec(a),
        app_exit_diagnostics=(a.diagnostics or None) if private else None,
        app_exit_messages=_messages(a) if private else None, app_exit_trigger_message=a.exit_reason or None,
        app_exit_trigger_task_role_name=a.trigger_role, app_exit_trigger_task_index=a.trigger_index,
        app_exit_type=a.exit_type or None, virtual_cluster=job.virtual_cluster, submission_time=job.created_ms)
    return V2JobDetail(debug_id=job.id, name=job.name, tags=tags, job_priority=None, job_status=status,
                       task_roles=_roles(job, a, private), tensorboard_address=job_tensorboard_address(job))


def v2_attempt(job: JobRecord, a: AttemptView, *, private: bool) -> V2JobAttempt:
    return V2JobAttempt(
        job_name=job.name, framework_name=framework_name(job.user, job.name), uid=f"{job.id}-{a.attempt}",
        user_name=job.user, state=a.state, origin_state=a.state, attempt_index=a.attempt,
        job_started_time=job.created_ms, attempt_started_time=a.launched_ms, attempt_completed_time=a.completed_ms,
        exit_code=a.exit_code, exit_phrase=a.exit_phrase or None, exit_type=a.exit_type or None,
        exit_diagnostics=(a.diagnostics or None) if private else None, app_exit_trigger_message=a.exit_reason or None,
        app_exit_trigger_task_role_name=a.trigger_role, app_exit_trigger_task_index=a.trigger_index,
        app_exit_spec=_exit_spec(a), app_exit_diagnostics=(a.diagnostics or None) if private else None,
        app_exit_messages=_messages(a) if private else None, total_gpu_number=job.config.total_gpus,
        total_task_number=job.config.total_tasks, total_task_role_number=len(job.config.task_roles),
        job_priority=None, task_roles=_roles(job, a, private), is_latest=a.latest)


def v2_task_attempts(job: JobRecord, a: AttemptView, task: TaskRecord, earlier: Sequence[TaskRun], *,
                     private: bool) -> V2TaskAttempts:
    """A task of attempt ``a`` with its runs, latest first as v1.8 listed them: the current one (the job's
    record), then ``earlier`` (its launchers' records of the runs before, newest first)."""
    return V2TaskAttempts(
        username=job.user, job_name=job.name, job_attempt_id=a.attempt, task_role_name=task.role,
        task_index=task.index, task_uid=f"{job.id}/{task.role}/{task.index}", task_state=task.state.value,
        retries=task.retries, accountable_retries=task.accountable_retries, created_time=task.started_ms,
        launched_time=task.started_ms, completed_time=task.completed_ms,
        attempts=(task_attempt(job, a.attempt, task, private),
                  *(earlier_run(job, a.attempt, task, r, private) for r in earlier if r.task_attempt < task.retries)))


def _iso(ms: int | None) -> str | None:
    return None if ms is None else datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds")[:-6] + "Z"


def _task_events(job: JobRecord, task: TaskRecord) -> list[V2JobEvent]:
    name = framework_name(job.user, job.name)
    base = {"framework_name": name, "pod_uid": task.container_id, "taskrole_name": task.role,
            "task_name": f"{task.role}-{task.index}", "task_index": task.index, "count": 1,
            "source_host": task.node_id}
    uid = f"{job.id}/{job.attempt}/{task.role}/{task.index}"
    out = []
    if task.node_id is not None:
        out.append(V2JobEvent(uid=f"{uid}/scheduled", type="Normal", reason="Scheduled",
                              message=f"assigned {name} {task.role}[{task.index}] to {task.node_id}",
                              first_timestamp=_iso(task.started_ms), last_timestamp=_iso(task.started_ms),
                              source_component="scheduler", **base))
    if task.started_ms is not None:
        out.append(V2JobEvent(uid=f"{uid}/started", type="Normal", reason="Started", message="started the container",
                              first_timestamp=_iso(task.started_ms), last_timestamp=_iso(task.started_ms),
                              source_component="launcher", **base))
    if task.completed_ms is not None:
        failed = task.exit_code not in (0, None)
        out.append(V2JobEvent(uid=f"{uid}/ended", type="Warning" if failed else "Normal",
                              reason="Failed" if failed else "Completed",
                              message=task.reason or f"the container exited with code {task.exit_code}",
                              first_timestamp=_iso(task.completed_ms), last_timestamp=_iso(task.completed_ms),
                              source_component="launcher", **base))
    return out


def v2_events(job: JobRecord, kind: str | None) -> V2JobEvents:
    """The current attempt's events, newest first; ``kind``: only ``Normal`` or ``Warning`` ones."""
    events = [e for t in job.tasks for e in _task_events(job, t)]
    if job.sub_state.value == "queued" and job.reason:
        events.append(V2JobEvent(
            uid=f"{job.id}/{job.attempt}/waiting", framework_name=framework_name(job.user, job.name), pod_uid=None,
            taskrole_name=None, task_name=None, task_index=None, type="Warning", reason="FailedScheduling",
            message=job.reason, first_timestamp=_iso(job.created_ms), last_timestamp=_iso(job.created_ms), count=1,
            source_component="scheduler", source_host=None))
    events = sorted((e for e in events if kind in (None, e.type)), key=lambda e: e.last_timestamp or "", reverse=True)
    return V2JobEvents(total_count=len(events), data=tuple(events))
