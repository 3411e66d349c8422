"""Jobs and users rendered in the shapes OpenPAI's REST API answered with (:mod:`services.submit.contract.answers`)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Literal

from services.submit.contract import answers
from services.submit.users import UserInfo, may_use
from shared.db.lists.paging import JobSummary
from shared.records import AttemptRecord, JobRecord, SubState, TaskRecord
from shared.scheduling.queueing import shown_reason
from shared.scheduling.vclusters import VirtualCluster


def user_view(user: UserInfo, vcs: Iterable[VirtualCluster]) -> answers.User:
    """A user as OpenPAI v0.14 answered ``GET /api/v1/user/:username`` (its v2 user model, password
    removed): ``virtualCluster`` lists the virtual clusters the user may submit to (by name or group; an
    administrator, every one); ``email`` is empty here, as it was in OpenPAI for a user without one."""
    allowed = tuple(vc.name for vc in vcs if may_use(vc, user.name, user.groups, admin=user.admin))
    return answers.User(username=user.name, email="", grouplist=user.groups,
                        extension=answers.UserExtension(virtual_cluster=allowed), admin=user.admin,
                        virtual_cluster=allowed)


def _retry_details(job: JobRecord | JobSummary) -> answers.RetryDetails:
    c = job.retry_counts
    return answers.RetryDetails(user=c.user, platform=c.platform, resource=c.resource)


def _exit_spec(job: JobRecord) -> answers.ExitSpec | None:
    if job.exit_code is None:
        return None
    return answers.ExitSpec(code=job.exit_code, phrase=job.exit_phrase, type=job.exit_type, reason=job.exit_reason)


def _attempt(a: AttemptRecord) -> answers.Attempt:
    return answers.Attempt(
        attempt=a.attempt, launched_time=a.launched_ms, completed_time=a.completed_ms, exit_code=a.exit_code,
        exit_phrase=a.exit_phrase, exit_type=a.exit_type, exit_reason=a.exit_reason,
        trigger_task_role_name=a.trigger_role, trigger_task_index=a.trigger_index,
        task_statuses=tuple(answers.AttemptTaskStatus(task_role_name=t.role, **dict(_task_status(t))) for t in a.tasks))


def _execution_type(job: JobRecord | JobSummary) -> Literal["START", "STOP"]:
    return "STOP" if job.stop_requested_by else "START"


def _position(job: JobRecord | JobSummary, positions: Mapping[str, int]) -> int | None:
    """A queued job's place in its queue (derived when read, :func:`shared.scheduling.queueing.queue_positions`)."""
    return positions.get(job.id) if job.sub_state == SubState.QUEUED else None


def job_summary(job: JobSummary, positions: Mapping[str, int]) -> answers.JobSummary:
    position = _position(job, positions)
    return answers.JobSummary(
        name=job.name, username=job.user, state=job.state, sub_state=job.sub_state,
        reason=shown_reason(job.reason, position, job.virtual_cluster), queue_position=position,
        execution_type=_execution_type(job), retries=job.retries, retry_details=_retry_details(job),
        created_time=job.created_ms, completed_time=job.completed_ms, app_exit_code=job.exit_code,
        virtual_cluster=job.virtual_cluster, total_gpu_number=job.gpu_count, total_task_number=job.task_count,
        total_task_role_number=job.role_count)


def _task_status(task: TaskRecord) -> answers.TaskStatus:
    return answers.TaskStatus(
        task_index=task.index, task_state=task.state, container_id=task.container_id, container_ip=task.ip,
        container_node_id=task.node_id,
        container_ports={label: ",".join(map(str, ps)) for label, ps in task.ports.items()},
        container_gpus=",".join(map(str, task.gpus)) if task.gpus else None, container_log="",
        container_exit_code=task.exit_code, container_exit_reason=task.reason,
        container_exit_diagnostics=task.diagnostics, launched_time=task.started_ms, completed_time=task.completed_ms,
        sub_state=task.sub_state, container_kept_until=task.kept_until_ms, retries=task.retries)


def job_detail(job: JobRecord, attempts: list[AttemptRecord], positions: Mapping[str, int],
               usage: answers.JobUsage | None = None) -> answers.JobDetail:
    """The job, its tasks, and its earlier ``attempts`` (kept apart from the job: ``Store.attempts_of``)."""
    roles = {
        role.name: answers.TaskRoleStatus(
            task_role_status=answers.TaskRoleName(name=role.name),
            task_statuses=tuple(_task_status(t) for t in job.tasks if t.role == role.name))
        for role in job.config.task_roles
    }
    position = _position(job, positions)
    status = answers.JobStatus(
        username=job.user, state=job.state, sub_state=job.sub_state,
        reason=shown_reason(job.reason, position, job.virtual_cluster), queue_position=position,
        execution_type=_execution_type(job), retries=job.retries, retry_details=_retry_details(job),
        created_time=job.created_ms, completed_time=job.completed_ms, app_exit_code=job.exit_code,
        virtual_cluster=job.virtual_cluster, app_launched_time=job.launched_ms, app_completed_time=job.completed_ms,
        app_exit_spec=_exit_spec(job), attempt=job.attempt, attempts=tuple(_attempt(a) for a in attempts),
        retry_at=job.retry_at_ms, app_exit_diagnostics=job.exit_diagnostics, app_exit_trigger_message=job.exit_reason,
        app_exit_trigger_task_role_name=job.trigger_role, app_exit_trigger_task_index=job.trigger_index, usage=usage)
    return answers.JobDetail(name=job.name, job_status=status, task_roles=roles)
