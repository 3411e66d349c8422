"""The job and task state machine: every transition a pure function of (job, event, now).

Each function returns the job as it must become plus the events that announce it, or None when the
event changes nothing (a duplicate, a stale attempt, a late report). The status service only reads,
calls one of these and writes the result over the version it read.

Job states: WAITING (queued, starting, pulling image, retry pending) -> SubState.RUNNING -> SUCCEEDED | FAILED |
STOPPED. ``sub_state`` says which part of a state a job is in; ``reason`` says why, in words.

When an attempt completes, the retry policy is frameworklauncher's (its RetryPolicyDescriptor and
Service.attemptToRetry; OpenPAI's rest-server turned retryCount -2 into ``fancyRetryPolicy: false``):

- retryCount N >= 0 or -1 ("fancy"): by the exit spec's reaction, transient failures (ALWAYS_RETRY,
  ALWAYS_BACKOFF_RETRY) are retried as platform / resource retries, at most ``max_platform_retries``
  each; permanent ones (NEVER_RETRY) end the job; the others (RETRY_TO_MAX: the user's code or unknown)
  are user retries, at most N of them, or without limit for -1. Success ends the job.
- retryCount -2 (not fancy): every completion, success included, starts a new attempt; the job runs
  until a user stops it (a service). Transient failures still count as platform / resource retries,
  everything else as a user retry.

Every retry waits a delay that doubles with each attempt in a row that ended soon after it launched, so
a crash loop cannot hammer the cluster; an attempt that ran longer than the cap resets it.

A preempted attempt (the scheduler's decision, exit -1004) is a platform retry that no cap ends (the
platform's own choice never fails a job), queued again at once with its original age.

A task that can never start is not retried: when the engine refused a task's container (exit 125,
before it ever ran) with the same error, ids and numbers aside, in ``max_start_failures`` attempts in a
row, the job fails saying so, whatever its retryCount (-2 included). A refusal the engine repeats word
for word is the task's own (a name too long for a file, a spec the engine rejects), not a node's passing
trouble; a transient one seldom repeats so, and costs nothing more than before until it does.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from shared.events import (
    CloudEvent,
    JobCompleted,
    JobCompletedData,
    JobRequeued,
    JobRequeuedData,
    JobRetrying,
    JobRetryingData,
    RelaunchTask,
    RelaunchTaskData,
    StopTasks,
    StopTasksData,
    TaskExitedData,
    TaskProgressData,
    TaskStartedData,
)
from shared.jobconfig.model import RETRY_ALWAYS, RETRY_UNLIMITED
from shared.lifecycle.completion import Completion, decide_completion
from shared.lifecycle.exitcodes import ENGINE_FAILURE, PREEMPTED, STOPPED_BY_USER
from shared.lifecycle.exitspec import ExitSpec, ExitSpecTable, Reaction
from shared.lifecycle.taskretry import TaskRetry, decide_task_retry
from shared.records import (
    AttemptRecord,
    JobRecord,
    JobState,
    SubState,
    TaskState,
    TaskSubState,
    holds_resources,
    initial_tasks,
)
from shared.taskref import TaskRef

Change = tuple[JobRecord, list[CloudEvent]]
Counter = Literal["user", "platform", "resource"]

JOB_DIAGNOSTICS_BUDGET = 512 * 1024  # characters of stderr tails one job document keeps over all its tasks
TASK_DIAGNOSTICS_MAX = 4000  # what a launcher sends (services/launcher/finish.py)
TASK_DIAGNOSTICS_MIN = 256


@dataclass(frozen=True)
class RetryPolicy:
    table: ExitSpecTable
    max_platform_retries: int = 10
    backoff_base_ms: int = 2000
    backoff_max_ms: int = 300_000
    # Attempts in a row that the engine's refusal of a task's container (the same error) may end before
    # the job fails instead of retrying: the first is retried as the platform's trouble, the second too,
    # the third shows that the task cannot start as it is.
    max_start_failures: int = 3

    def delay_ms(self, streak: int, reaction: Reaction) -> int:
        """The wait before the next attempt after ``streak`` earlier attempts in a row ended quickly."""
        base = self.backoff_base_ms * (4 if reaction is Reaction.ALWAYS_BACKOFF_RETRY else 1)
        return int(min(base * 2 ** min(streak, 32), self.backoff_max_ms))

    def streak(self, job: JobRecord, now: int) -> int:
        """The job's backoff streak as its current attempt ending at ``now`` leaves it: 0 when the attempt
        ran longer than the backoff's cap (a healthy run: restart promptly), else the streak so far."""
        ran_ms = now - job.launched_ms if job.launched_ms is not None else 0
        return 0 if ran_ms > self.backoff_max_ms else job.backoff_streak


def _with_task(job: JobRecord, slot: int, **changes: object) -> JobRecord:
    tasks = list(job.tasks)
    tasks[slot] = tasks[slot].model_copy(update=changes)
    return job.model_copy(update={"tasks": tuple(tasks)})


def _sub_state(job: JobRecord) -> SubState:
    """The job's sub-state, derived from its state and its tasks'."""
    if job.state.is_final:
        return SubState.STOPPING if any(t.state == TaskState.RUNNING for t in job.tasks) else SubState.COMPLETED
    if job.state == JobState.RUNNING:
        return SubState.RUNNING
    if job.sub_state in (SubState.QUEUED, SubState.RETRY_PENDING):
        return job.sub_state
    return SubState.PULLING if any(t.sub_state == TaskSubState.PULLING for t in job.tasks) else SubState.STARTING


def _settle(job: JobRecord) -> JobRecord:
    return job.model_copy(update={"sub_state": _sub_state(job)})


def _slot(job: JobRecord, attempt: int, role: str, index: int) -> int | None:
    if attempt != job.attempt:
        return None  # a report from an attempt that is over
    try:
        return job.task_slot(role, index)
    except KeyError:
        return None


def _run_slot(job: JobRecord, d: TaskRef) -> int | None:
    """The task a report about one run of it is for; None when that run is not the task's current one (a
    late or redelivered report of a run that was followed by a re-run: taskRetryCount)."""
    slot = _slot(job, d.attempt, d.role, d.index)
    return None if slot is None or job.tasks[slot].retries != d.task_attempt else slot


def task_started(job: JobRecord, d: TaskStartedData, now: int) -> Change | None:
    slot = _run_slot(job, d)
    if slot is None or job.tasks[slot].state != TaskState.WAITING:
        return None
    # Even for a job already over: the container runs and holds resources until the launcher stops it.
    job = _with_task(job, slot, state=TaskState.RUNNING, container_id=d.container_id, started_ms=now,
                     sub_state=TaskSubState.NONE, reason="")  # what it did before (pulling its image) is over
    if job.state == JobState.WAITING and job.sub_state != SubState.RETRY_PENDING:
        job = job.model_copy(update={"state": JobState.RUNNING, "launched_ms": job.launched_ms or now,
                                     "reason": ""})
    return _settle(job), []


def task_progress(job: JobRecord, d: TaskProgressData, now: int) -> Change | None:
    """A task not yet ended says what it does: pulling its image, kept for debugging, or (running) that
    ssh into it is unavailable."""
    slot = _run_slot(job, d)
    if slot is None or job.tasks[slot].state.is_final:
        return None
    job = _with_task(job, slot, sub_state=d.sub_state, kept_until_ms=d.kept_until_ms, reason=d.detail)
    return _settle(job), []


def task_exited(job: JobRecord, d: TaskExitedData, now: int, policy: RetryPolicy) -> Change | None:
    slot = _run_slot(job, d)
    if slot is None or job.tasks[slot].state.is_final:
        return None
    attempt_over = job.state.is_final or job.sub_state == SubState.RETRY_PENDING
    if not attempt_over:
        again = decide_task_retry(job.config, job.config.role(d.role), job.tasks[slot], d.exit_code, d.reason,
                                  table=policy.table, max_platform_retries=policy.max_platform_retries)
        if again is not None:
            return _run_again(job, slot, d, again)
    job = _with_task(job, slot, state=_exit_state(d.exit_code, attempt_over), exit_code=d.exit_code,
                     reason=d.reason, diagnostics=kept_diagnostics(d.diagnostics, job.config.total_tasks),
                     completed_ms=now, sub_state=TaskSubState.NONE, kept_until_ms=None,
                     container_id=d.container_id or job.tasks[slot].container_id)
    if attempt_over:
        return _settle(job), []
    outcome = decide_completion(job)
    if outcome is None:
        return _settle(job), []
    if (outcome.trigger_role, outcome.trigger_index) == (d.role, d.index):
        outcome = outcome.model_copy(update={"diagnostics": d.diagnostics})  # the job keeps its trigger's whole tail
    return conclude(job, outcome, now, policy)


def _run_again(job: JobRecord, slot: int, d: TaskExitedData, again: TaskRetry) -> Change:
    """The task's run ended and it runs again in place (taskRetryCount): waiting again on its node, its
    last exit kept in its reason, and its node's launcher told to start its next run."""
    task = job.tasks[slot]
    job = _with_task(job, slot, state=TaskState.WAITING, retries=again.retries,
                     accountable_retries=again.accountable_retries, reason=again.reason, exit_code=None,
                     diagnostics=kept_diagnostics(d.diagnostics, job.config.total_tasks), container_id=None,
                     started_ms=None, completed_ms=None, sub_state=TaskSubState.NONE, kept_until_ms=None)
    relaunch = RelaunchTask(subject=job.id, data=RelaunchTaskData(
        job_id=job.id, attempt=job.attempt, role=task.role, index=task.index, task_attempt=again.retries,
        node_id=str(task.node_id), reason=again.reason))
    return _settle(job), [relaunch]


def kept_diagnostics(text: str, total_tasks: int) -> str:
    """The end of a task's stderr tail that its job document keeps: every task shares
    ``JOB_DIAGNOSTICS_BUDGET``, so a 2,000-task job stays small (the whole tail stays in the task's run
    and its log)."""
    cap = max(TASK_DIAGNOSTICS_MIN, min(TASK_DIAGNOSTICS_MAX, JOB_DIAGNOSTICS_BUDGET // max(1, total_tasks)))
    return text[-cap:]


def _exit_state(code: int, attempt_over: bool) -> TaskState:
    """A task that fails after its attempt ended was stopped by that ending, not failed on its own."""
    if code == 0:
        return TaskState.SUCCEEDED
    return TaskState.STOPPED if attempt_over else TaskState.FAILED


def conclude(job: JobRecord, outcome: Completion, now: int, policy: RetryPolicy) -> Change:
    """An attempt completed: retry it if the retry policy allows, else end the job."""
    spec = policy.table.spec(outcome.exit_code)
    starts = start_failures(job, outcome)
    job = job.model_copy(update={"start_failures": starts})
    if starts >= policy.max_start_failures:
        outcome = outcome.model_copy(update={"reason": (
            f"the task cannot start: the engine refused its container with the same error in {starts} attempts "
            f"in a row, so it is not retried; {outcome.reason}")})
        return _finish(job, outcome, now, phrase=spec.phrase, kind=spec.type.value)
    counter = retry_counter(job, outcome, spec, policy)
    if counter is not None:
        return _retry(job, outcome, counter, now, policy)
    return _finish(job, outcome, now, phrase=spec.phrase, kind=spec.type.value)


def start_failures(job: JobRecord, outcome: Completion) -> int:
    """Attempts in a row, this one included, that ended because the engine could not start a task's
    container (exit 125 from a task that never ran) with the same error as the one before; 0 when this
    attempt did not end so. ``job`` is as the attempt left it: ``exit_reason`` is the previous attempt's."""
    if outcome.state != JobState.FAILED or outcome.exit_code != ENGINE_FAILURE or outcome.trigger_role is None:
        return 0
    slot = _slot(job, job.attempt, outcome.trigger_role, outcome.trigger_index or 0)
    if slot is None or job.tasks[slot].started_ms is not None:
        return 0  # it ran: the engine failed it later, or its command exited 125
    same = job.start_failures > 0 and error_shape(job.exit_reason) == error_shape(outcome.reason)
    return job.start_failures + 1 if same else 1


# What differs between two reports of one error: container names (they hold the attempt), ids, numbers.
_VARYING = re.compile(r"paiq-[A-Za-z0-9_.-]+|[0-9a-f]{12,}|[0-9]+")


def error_shape(reason: str) -> str:
    """``reason`` with what varies between attempts (container names and ids, numbers) blanked."""
    return _VARYING.sub("#", reason)


_TRANSIENT: dict[Reaction, Counter] = {Reaction.ALWAYS_RETRY: "platform", Reaction.ALWAYS_BACKOFF_RETRY: "resource"}


def retry_counter(job: JobRecord, outcome: Completion, spec: ExitSpec, policy: RetryPolicy) -> Counter | None:
    """The counter the next attempt counts on ("user", "platform", "resource"), or None: the job ends."""
    limit = job.config.retry_count
    failed = outcome.state == JobState.FAILED
    if outcome.state == JobState.STOPPED:
        return None
    if failed and outcome.exit_code == PREEMPTED:
        return "platform"
    if limit == RETRY_ALWAYS:  # not fancy: every completion starts a new attempt
        return _TRANSIENT.get(spec.reaction, "user") if failed else "user"
    if not failed:
        return None
    transient = _TRANSIENT.get(spec.reaction)
    if transient is not None:
        return transient if getattr(job.retry_counts, transient) < policy.max_platform_retries else None
    if spec.reaction is Reaction.RETRY_TO_MAX and (limit == RETRY_UNLIMITED or job.retry_counts.user < limit):
        return "user"
    return None


def retry_budget(retry_count: int, counter: str, n: int) -> str:
    """The retry policy in words, for the ``n``-th retry counted on ``counter``."""
    if retry_count == RETRY_ALWAYS:
        return f"{counter} retry {n}; started again after every exit until stopped (retryCount -2)"
    if counter != "user":
        return f"not counted against retryCount ({counter} retry {n})"
    if retry_count == RETRY_UNLIMITED:
        return f"user retry {n}, unlimited (retryCount -1)"
    return f"{n} of {retry_count} allowed"


def _exit_fields(job: JobRecord, outcome: Completion, policy_phrase: str, policy_type: str) -> dict[str, object]:
    return {"exit_code": outcome.exit_code, "exit_reason": outcome.reason, "exit_diagnostics": outcome.diagnostics,
            "trigger_role": outcome.trigger_role, "trigger_index": outcome.trigger_index,
            "exit_phrase": policy_phrase, "exit_type": policy_type}


def _close_waiting(job: JobRecord, why: str, now: int) -> JobRecord:
    """Tasks that never started and never will stop holding their node's resources."""
    ended = {"state": TaskState.STOPPED, "reason": why, "completed_ms": now, "sub_state": TaskSubState.NONE}
    tasks = tuple(t.model_copy(update=ended) if t.state == TaskState.WAITING else t for t in job.tasks)
    return job.model_copy(update={"tasks": tasks})


def stop_commands(job: JobRecord, *, attempt: int | None, by_user: bool, reason: str) -> list[CloudEvent]:
    """One stop command to each node that holds a task of the job (launching or running), none to others."""
    nodes = sorted({str(t.node_id) for t in job.tasks if holds_resources(t)})
    return [StopTasks(subject=job.id, data=StopTasksData(job_id=job.id, attempt=attempt, node_id=node,
                                                         by_user=by_user, reason=reason)) for node in nodes]


def _finish(job: JobRecord, outcome: Completion, now: int, *, phrase: str = "", kind: str = "") -> Change:
    stops = stop_commands(job, attempt=None, by_user=outcome.state == JobState.STOPPED, reason=outcome.reason)
    job = _close_waiting(job, "the job ended before this task started", now)
    job = job.model_copy(update={"state": outcome.state, "completed_ms": now, "retry_at_ms": None,
                                 **_exit_fields(job, outcome, phrase, kind)})
    event = JobCompleted(subject=job.id, data=JobCompletedData(
        job_id=job.id, attempt=job.attempt, state=outcome.state, exit_code=outcome.exit_code,
        reason=outcome.reason, trigger_role=outcome.trigger_role, trigger_index=outcome.trigger_index))
    return _settle(job), [event, *stops]


def _retry(job: JobRecord, outcome: Completion, counter: Counter, now: int, policy: RetryPolicy) -> Change:
    spec = policy.table.spec(outcome.exit_code)
    counts = job.retry_counts.model_copy(update={counter: getattr(job.retry_counts, counter) + 1})
    preempted = outcome.exit_code == PREEMPTED
    streak = job.backoff_streak if preempted else policy.streak(job, now)
    delay = 0 if preempted else policy.delay_ms(streak, spec.reaction)
    ended = ("succeeded" if outcome.state == JobState.SUCCEEDED else outcome.reason if preempted
             else f"failed with exit {outcome.exit_code} ({spec.phrase}: {spec.reason})")
    budget = retry_budget(job.config.retry_count, counter, getattr(counts, counter))
    reason = f"attempt {job.attempt} {ended}; retry {counts.total}, {budget}, in {delay / 1000:g}s"
    stops = stop_commands(job, attempt=job.attempt, by_user=False, reason=reason)
    job = _close_waiting(job, "the attempt ended before this task started", now)
    job = job.model_copy(update={
        "state": JobState.WAITING, "sub_state": SubState.RETRY_PENDING, "reason": reason, "retry_counts": counts,
        "retries": counts.total, "retry_at_ms": now + delay, "backoff_streak": streak + (not preempted),
        **_exit_fields(job, outcome, spec.phrase, spec.type.value)})
    event = JobRetrying(subject=job.id, data=JobRetryingData(
        job_id=job.id, attempt=job.attempt, exit_code=outcome.exit_code, reason=reason, counter=counter,
        retry_at_ms=now + delay))
    return job, [event, *stops]


def retry_due(job: JobRecord, now: int) -> Change | None:
    """Start the next attempt once its delay passed and every task of the last one has ended."""
    if job.sub_state != SubState.RETRY_PENDING or job.state != JobState.WAITING:
        return None
    if (job.retry_at_ms or 0) > now or not all(t.state.is_final for t in job.tasks):
        return None
    past = AttemptRecord(attempt=job.attempt, tasks=job.tasks, launched_ms=job.launched_ms, completed_ms=now,
                         exit_code=job.exit_code, exit_phrase=job.exit_phrase, exit_type=job.exit_type,
                         exit_reason=job.exit_reason, trigger_role=job.trigger_role,
                         trigger_index=job.trigger_index)
    # A preempted job keeps its place: its new attempt is as old in the queue as the one stopped.
    queued = (job.queued_ms or job.created_ms) if job.exit_code == PREEMPTED else now
    job = job.model_copy(update={
        "archived": (past,), "attempt": job.attempt + 1, "tasks": initial_tasks(job.config),
        "sub_state": SubState.QUEUED, "reason": f"attempt {job.attempt + 1} queued after: {job.exit_reason}",
        "parked": False, "preempted": None,
        "retry_at_ms": None, "launched_ms": None, "queued_ms": queued})
    return job, [JobRequeued(subject=job.id, data=JobRequeuedData(job_id=job.id, attempt=job.attempt))]


def stop_requested(job: JobRecord, by: str, now: int) -> Change | None:
    if job.state.is_final:
        return None
    outcome = Completion(state=JobState.STOPPED, exit_code=STOPPED_BY_USER, reason=f"stopped by {by}")
    return _finish(job, outcome, now, phrase="UserStoppedByRequest", kind="USER_STOP")


def preempted(job: JobRecord, now: int, policy: RetryPolicy) -> Change | None:
    """The scheduler preempted the job's current attempt (``job.preempted``): it ends as a platform
    failure, its containers are stopped (SIGTERM, then SIGKILL after the grace period) and it is queued
    again once they are gone. Nothing when the attempt is over already or the decision was for another."""
    mark = job.preempted
    if mark is None or mark.attempt != job.attempt or job.state.is_final or job.sub_state == SubState.RETRY_PENDING:
        return None
    outcome = Completion(state=JobState.FAILED, exit_code=PREEMPTED, reason=mark.reason)
    return conclude(job, outcome, now, policy)
