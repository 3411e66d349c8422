"""OpenPAI's completion policy, per task role, as a pure function of a job's task states.

1. minFailedTaskCount set and that many tasks of a role failed: the job FAILS at once, with the
   triggering task's exit info.
2. minSucceededTaskCount set and that many tasks of a role succeeded: the job SUCCEEDS at once, even
   with tasks still running (they are then stopped).
3. Neither fired and every task has completed: the job SUCCEEDS.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from shared.records import JobRecord, JobState, TaskRecord, TaskState


class Completion(BaseModel):
    model_config = ConfigDict(frozen=True)
    state: JobState
    exit_code: int
    reason: str
    trigger_role: str | None = None
    trigger_index: int | None = None
    diagnostics: str = ""


def _latest(tasks: list[TaskRecord]) -> TaskRecord:
    return max(tasks, key=lambda t: (t.completed_ms or 0, t.index))


def decide_completion(job: JobRecord) -> Completion | None:
    """The job's outcome if its current task states complete it, else None."""
    for role in job.config.task_roles:
        tasks = [t for t in job.tasks if t.role == role.name]
        failed = [t for t in tasks if t.state == TaskState.FAILED]
        if role.min_failed_task_count is not None and len(failed) >= role.min_failed_task_count:
            t = _latest(failed)
            return Completion(
                state=JobState.FAILED, exit_code=t.exit_code if t.exit_code is not None else 1,
                reason=(f"{len(failed)} task(s) of role {role.name} failed (minFailedTaskCount "
                        f"{role.min_failed_task_count}); {role.name}[{t.index}] exited {t.exit_code}"
                        + (f": {t.reason}" if t.reason else "")),
                trigger_role=t.role, trigger_index=t.index, diagnostics=t.diagnostics)
    for role in job.config.task_roles:
        tasks = [t for t in job.tasks if t.role == role.name]
        succeeded = [t for t in tasks if t.state == TaskState.SUCCEEDED]
        if role.min_succeeded_task_count is not None and len(succeeded) >= role.min_succeeded_task_count:
            t = _latest(succeeded)
            return Completion(
                state=JobState.SUCCEEDED, exit_code=0,
                reason=(f"{len(succeeded)} task(s) of role {role.name} succeeded "
                        f"(minSucceededTaskCount {role.min_succeeded_task_count})"),
                trigger_role=t.role, trigger_index=t.index)
    if job.tasks and all(t.state.is_final for t in job.tasks):
        return Completion(state=JobState.SUCCEEDED, exit_code=0, reason="all tasks completed")
    return None
