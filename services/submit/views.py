"""Jobs and users rendered in the shapes OpenPAI's REST API answered with (times in ms since epoch)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from services.submit.users import UserInfo
from shared.joblist import JobSummary
from shared.queueing import shown_reason
from shared.records import AttemptRecord, JobRecord, SubState, TaskRecord
from shared.vclusters import VirtualCluster


def user_view(user: UserInfo, vcs: Iterable[VirtualCluster]) -> dict[str, Any]:
    """A user as OpenPAI v0.14 answered ``GET /api/v1/user/:username`` (its v2 user model, password
    removed): ``virtualCluster`` lists the virtual clusters the user may submit to, by name or group;
    paiq keeps no e-mail address, so ``email`` is empty as it was in OpenPAI for a user without one."""
    allowed = [vc.name for vc in vcs if vc.admits(user.name, user.groups)]
    return {"username": user.name, "email": "", "grouplist": list(user.groups),
            "extension": {"virtualCluster": allowed}, "admin": user.admin, "virtualCluster": allowed}


def _retry_details(job: JobRecord | JobSummary) -> dict[str, int]:
    c = job.retry_counts
    return {"user": c.user, "platform": c.platform, "resource": c.resource}


def _exit_spec(job: JobRecord) -> dict[str, Any] | None:
    if job.exit_code is None:
        return None
    return {"code": job.exit_code, "phrase": job.exit_phrase, "type": job.exit_type, "reason": job.exit_reason}


def _attempt(a: AttemptRecord) -> dict[str, Any]:
    return {"attempt": a.attempt, "launchedTime": a.launched_ms, "completedTime": a.completed_ms,
            "exitCode": a.exit_code, "exitPhrase": a.exit_phrase, "exitType": a.exit_type,
            "exitReason": a.exit_reason, "triggerTaskRoleName": a.trigger_role, "triggerTaskIndex": a.trigger_index,
            "taskStatuses": [{"taskRoleName": t.role, **_task_status(t)} for t in a.tasks]}


def _status(job: JobRecord | JobSummary, positions: Mapping[str, int]) -> dict[str, Any]:
    """The fields the list and the detail of a job both carry; ``positions``: queued jobs' places in
    their queues (derived when read, :func:`shared.queueing.queue_positions`)."""
    position = positions.get(job.id) if job.sub_state == SubState.QUEUED else None
    return {
        "state": job.state.value,
        "subState": job.sub_state,
        "reason": shown_reason(job.reason, position, job.virtual_cluster),
        "queuePosition": position,
        "executionType": "STOP" if job.stop_requested_by else "START",
        "retries": job.retries,
        "retryDetails": _retry_details(job),
        "createdTime": job.created_ms,
        "completedTime": job.completed_ms,
        "appExitCode": job.exit_code,
        "virtualCluster": job.virtual_cluster,
    }


def job_summary(job: JobSummary, positions: Mapping[str, int]) -> dict[str, Any]:
    return {
        "name": job.name,
        "username": job.user,
        **_status(job, positions),
        "totalGpuNumber": job.gpu_count,
        "totalTaskNumber": job.task_count,
        "totalTaskRoleNumber": job.role_count,
    }


def _task_status(task: TaskRecord) -> dict[str, Any]:
    return {
        "taskIndex": task.index,
        "taskState": task.state.value,
        "containerId": task.container_id,
        "containerIp": task.ip,
        "containerNodeId": task.node_id,
        "containerPorts": {label: ",".join(map(str, ps)) for label, ps in task.ports.items()},
        "containerGpus": ",".join(map(str, task.gpus)) if task.gpus else None,
        "containerLog": "",
        "containerExitCode": task.exit_code,
        "containerExitReason": task.reason,
        "containerExitDiagnostics": task.diagnostics,
        "launchedTime": task.started_ms,
        "completedTime": task.completed_ms,
        "subState": task.sub_state,
        "containerKeptUntil": task.kept_until_ms,
    }


PRIVATE_FIELDS = ("appExitDiagnostics", "containerExitDiagnostics")


def without_private(value: Any) -> Any:
    """The same answer with what a program printed (stderr tails) blanked, for anyone but its owner."""
    if isinstance(value, dict):
        return {k: "" if k in PRIVATE_FIELDS else without_private(v) for k, v in value.items()}
    if isinstance(value, list):
        return [without_private(v) for v in value]
    return value


def job_detail(job: JobRecord, attempts: list[AttemptRecord], positions: Mapping[str, int]) -> dict[str, Any]:
    """The job, its tasks, and its earlier ``attempts`` (kept apart from the job: ``Store.attempts_of``)."""
    roles: dict[str, Any] = {}
    for role in job.config.task_roles:
        roles[role.name] = {
            "taskRoleStatus": {"name": role.name},
            "taskStatuses": [_task_status(t) for t in job.tasks if t.role == role.name],
        }
    return {
        "name": job.name,
        "jobStatus": {
            "username": job.user,
            **_status(job, positions),
            "appLaunchedTime": job.launched_ms,
            "appCompletedTime": job.completed_ms,
            "appExitSpec": _exit_spec(job),
            "attempt": job.attempt,
            "attempts": [_attempt(a) for a in attempts],
            "retryAt": job.retry_at_ms,
            "appExitDiagnostics": job.exit_diagnostics,
            "appExitTriggerMessage": job.exit_reason,
            "appExitTriggerTaskRoleName": job.trigger_role,
            "appExitTriggerTaskIndex": job.trigger_index,
        },
        "taskRoles": roles,
    }
