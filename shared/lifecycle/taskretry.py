"""Re-running one failed task in place: protocol v2's ``taskRetryCount``, as frameworkcontroller did it.

OpenPAI v1.8's rest-server (``models/v2/job/k8s.js``) gave each task role of a framework the task retry
policy ``{fancyRetryPolicy: true, maxRetryCount: taskRetryCount || 0}`` only when the job said
``extras.gangAllocation: false``; otherwise ``{fancyRetryPolicy: false, maxRetryCount: 0}``: no task was
ever re-run ("this setting won't work unless you set extras.gangAllocation to false",
docs/manual/cluster-user/how-to-use-advanced-job-settings.md). frameworkcontroller's
``RetryPolicySpec.ShouldRetry`` then decided, for a task whose run (pod) completed, with the exit spec's
reaction standing for its completion type here:

=====================================  ======================================================================
the run ended                          decision
=====================================  ======================================================================
succeeded (exit 0)                     the task succeeded (taskRetryCount -2 is refused at submit)
its attempt is over, or stopped by     no re-run (frameworkcontroller's built-in policy: a stop, an attempt
its user (-210)                        completing)
lost with its node (-1001)             no re-run: paiq runs a task again on the node it holds, and there is
                                       none; it fails and the job's own policy takes over (a new attempt)
refused by the engine before it ran    no re-run: the job's policy owns a task that can never start (the same
(125, never started)                   refusal in attempts in a row ends the job: shared.lifecycle.transitions)
NEVER_RETRY (permanent)                no re-run: the task fails
ALWAYS_RETRY, ALWAYS_BACKOFF_RETRY     re-run, not counted against taskRetryCount (frameworkcontroller: the
(transient)                            platform's fault), at most ``max_platform_retries`` times a task
                                       (frameworkcontroller: without limit; paiq bounds it as it bounds a
                                       job's platform retries)
anything else (RETRY_TO_MAX: the       re-run while the task's accountable retries are under taskRetryCount,
user's code, unknown)                  or always with -1; else the task fails with that exit
=====================================  ======================================================================

A task that fails for good counts toward its role's ``minFailedTaskCount`` with its last run's exit code,
and the job's own retry policy (``jobRetryCount``) follows as for any attempt. A re-run keeps the task's
node, GPUs and ports (its job keeps its placement) and its environment, but for ``FC_TASK_ATTEMPT_ID``
and its container's name; a new attempt of the job starts every task's count again from 0.
The launcher waits :func:`relaunch_delay_ms` before a re-run, so a task that fails at once cannot
restart in a tight loop (frameworkcontroller re-ran at once).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

from shared.jobconfig.model import RETRY_UNLIMITED, JobConfig, TaskRole
from shared.lifecycle.exitcodes import ENGINE_FAILURE, NODE_LOST, STOPPED_BY_USER
from shared.lifecycle.exitspec import ExitSpecTable, Reaction
from shared.records import TaskRecord

RELAUNCH_DELAY_MAX_MS = 60_000


class TaskRetry(BaseModel):
    """The decision to run a failed task again in place."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    counter: Literal["user", "platform"]  # "user": counted against taskRetryCount
    retries: int  # the task's retries with this one: the number of its next run
    accountable_retries: int
    reason: str  # in words, shown as the task's reason until its next run starts


def retries_in_place(config: JobConfig) -> bool:
    """Whether the job's tasks may be re-run in place: OpenPAI honoured taskRetryCount only without gang
    allocation (``extras.gangAllocation: false``, the boolean)."""
    return config.extras.get("gangAllocation") is False


def decide_task_retry(config: JobConfig, role: TaskRole, task: TaskRecord, exit_code: int, reason: str, *,
                      table: ExitSpecTable, max_platform_retries: int) -> TaskRetry | None:
    """Whether the current run of ``task`` (of ``role``, still as it was before this exit), which ended with
    ``exit_code`` while its attempt goes on, is followed by another run; None: the task ends with it."""
    if exit_code == 0 or not retries_in_place(config):
        return None
    if exit_code in (STOPPED_BY_USER, NODE_LOST) or task.node_id is None:
        return None
    if exit_code == ENGINE_FAILURE and task.started_ms is None:
        return None
    reaction = table.spec(exit_code).reaction
    if reaction is Reaction.NEVER_RETRY:
        return None
    if reaction in (Reaction.ALWAYS_RETRY, Reaction.ALWAYS_BACKOFF_RETRY):
        if task.retries - task.accountable_retries >= max_platform_retries:
            return None
        return _retry(task, "platform", exit_code, reason, f"not counted against taskRetryCount (the platform's, "
                                                           f"at most {max_platform_retries})")
    limit = role.task_retry_count or 0
    if limit != RETRY_UNLIMITED and task.accountable_retries >= limit:
        return None
    budget = "unlimited (taskRetryCount -1)" if limit == RETRY_UNLIMITED else \
        f"{task.accountable_retries + 1} of {limit} allowed"
    return _retry(task, "user", exit_code, reason, budget)


def _retry(task: TaskRecord, counter: Literal["user", "platform"], exit_code: int, reason: str,
           budget: str) -> TaskRetry:
    retries = task.retries + 1
    accountable = task.accountable_retries + (counter == "user")
    ended = f"run {task.retries} exited {exit_code}" + (f" ({reason})" if reason else "")
    return TaskRetry(counter=counter, retries=retries, accountable_retries=accountable,
                     reason=f"{ended}; task retry {retries}, {budget}")


def relaunch_delay_ms(task_attempt: int, base_ms: int) -> int:
    """How long a launcher waits before run ``task_attempt`` of a task (0 for a first run): ``base_ms``
    doubling with each re-run, at most a minute."""
    if task_attempt <= 0:
        return 0
    return int(min(base_ms * 2 ** min(task_attempt - 1, 16), RELAUNCH_DELAY_MAX_MS))
