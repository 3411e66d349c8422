"""What the launcher does about one task, decided purely from what it sees: a table, tested as one.

The async modules look (the engine's container, the task's run in MongoDB, the job) and carry out
what :func:`decide` returns; nothing here awaits. Three things prompt a look:

- ``LAUNCH``: the scheduler asked to start the task (the container looked up by its name; the run
  unknown until it is claimed, so the launch asks twice: before the claim and after it);
- ``PASS``: the reconcile pass found the task's container on this node, or found the task placed on
  this node with no container (then the run is read);
- ``EXIT``: the task's container ended.

=========  ===========================================  ================================================
prompt     seen                                         action
=========  ===========================================  ================================================
LAUNCH     job gone, over or on another attempt         SKIP_STALE
LAUNCH     the task is on another run (taskRetryCount)  SKIP_STALE
LAUNCH     container running                            ADOPT (announced)
LAUNCH     container ended                              NOTHING: the exit path reports it
LAUNCH     run not claimed yet                          CLAIM, then decide again with the claimed run
LAUNCH     run ended                                    NOTHING: it ran here already, never again
LAUNCH     run running, no container                    REPORT_LOST
LAUNCH     otherwise                                    START
PASS       container created, never started             NOTHING: a launch starts it
PASS       container ended                              FINISH: the exit path looks again and reports
PASS       container running, job gone/over/other try   STOP (by user when the user stopped that try)
PASS       container running, task on another run       STOP
PASS       container running, job current              ADOPT (announced if shown waiting, not sent yet)
PASS       no container, task over                      NOTHING
PASS       no container, run ended long enough ago      RESEND_EXIT: its report was lost
PASS       no container, run ended just now             NOTHING: the job takes it in shortly
PASS       no container, job over                       NOTHING
PASS       no container, task waiting or run running    RELAUNCH: the launch looks again, fresh
PASS       no container, job shows it running, no run   NOTHING: left alone
EXIT       job gone                                     FORGET: removed without a report
EXIT       otherwise                                    REPORT_EXIT (by user, see below)
=========  ===========================================  ================================================

A task was stopped by its user when a user's stop command stopped its container, or when the job's
user asked to stop the attempt the task belongs to (:func:`stopped_by_user`, the one place this is
said); its exit is then reported as -210 whatever code the signal left.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

from pydantic import BaseModel, ConfigDict

from services.launcher.engine.driver import ContainerExit, ContainerInfo
from shared.records import JobRecord, TaskRecord, TaskState
from shared.taskref import TaskRef


class Prompt(StrEnum):
    LAUNCH = "launch"
    PASS = "pass"
    EXIT = "exit"


class ContainerState(StrEnum):
    CREATED = "created"  # created, never started
    RUNNING = "running"
    ENDED = "ended"


class Action(StrEnum):
    NOTHING = "nothing"
    SKIP_STALE = "skip-stale"  # a launch for a job that is gone, over, or on another attempt
    CLAIM = "claim"  # claim the task's run, then decide again
    START = "start"  # pull if needed, create and start the container
    ADOPT = "adopt"  # record a running container's output; say it started
    RELAUNCH = "relaunch"  # hand the task to the launch path, which looks again
    REPORT_LOST = "report-lost"  # it started once but its container is gone
    RESEND_EXIT = "resend-exit"  # report the stored exit again
    STOP = "stop"  # SIGTERM, then SIGKILL
    FINISH = "finish"  # hand the ended container to the exit path
    REPORT_EXIT = "report-exit"  # save its log, report its exit, remove it
    FORGET = "forget"  # remove it without a report


class Decision(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    action: Action
    why: str
    by_user: bool = False  # STOP, REPORT_EXIT: the exit is reported as stopped by user
    announce: bool = False  # ADOPT: send task.started (again)


class RunSeen(BaseModel):
    """The task's run in the log store, as far as a decision needs it."""

    model_config = ConfigDict(frozen=True, extra="ignore", from_attributes=True)
    phase: Literal["launching", "running", "ended"]
    ended_ms: int | None = None
    exit_code: int | None = None


class Seen(BaseModel):
    """One task as the launcher sees it now."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    prompt: Prompt
    task: TaskRef
    job: JobRecord | None
    container: ContainerState | None = None
    run: RunSeen | None = None
    user_stop: bool = False  # a user's stop command stopped this container
    announced: bool = False  # this process says or said the container started (its task.started published)
    now_ms: int = 0
    stale_after_ms: int = 0  # PASS: how long an ended run's report may take to reach the job


def container_state(info: ContainerInfo | ContainerExit | None) -> ContainerState | None:
    if info is None:
        return None
    if isinstance(info, ContainerExit):
        return ContainerState.ENDED
    if info.status == "created":
        return ContainerState.CREATED
    return ContainerState.RUNNING if info.running else ContainerState.ENDED


def run_seen(run: object | None) -> RunSeen | None:
    """A stored run (:class:`shared.db.logs.TaskRun`) as :class:`Seen` holds it."""
    return None if run is None else RunSeen.model_validate(run)


def stopped_by_user(job: JobRecord | None, attempt: int, *, user_stop: bool) -> bool:
    """Whether a task's exit is its user's doing: a user's stop command stopped its container, or the
    job's user asked to stop the attempt it belongs to."""
    return user_stop or (job is not None and job.attempt == attempt and bool(job.stop_requested_by))


def is_current(job: JobRecord | None, attempt: int) -> bool:
    """The job exists, is not over, and is on this attempt."""
    return job is not None and not job.state.is_final and job.attempt == attempt


def still_wanted(job: JobRecord | None, attempt: int, role: str, index: int, task_attempt: int = 0) -> bool:
    """Whether a task about to start (or just started) is still wanted: its job current, the task not over
    and on this run of it."""
    if job is None or not is_current(job, attempt):
        return False
    task = _task(job, role, index)
    return task is not None and not task.state.is_final and task.retries == task_attempt


def _other_run(job: JobRecord | None, ref: TaskRef) -> bool:
    """Whether the job shows the task on another run than ``ref``'s (re-run in place since, or not yet)."""
    task = None if job is None else _task(job, ref.role, ref.index)
    return task is not None and task.retries != ref.task_attempt


def decide(seen: Seen) -> Decision:
    if seen.prompt is Prompt.LAUNCH:
        return _on_launch(seen)
    if seen.prompt is Prompt.EXIT:
        return _on_exit(seen)
    if seen.container is None:
        return _on_placed(seen)
    return _on_container(seen)


def _on_launch(seen: Seen) -> Decision:
    if not is_current(seen.job, seen.task.attempt):
        return Decision(action=Action.SKIP_STALE, why="the job is gone, over, or on another attempt")
    if _other_run(seen.job, seen.task):
        return Decision(action=Action.SKIP_STALE, why="the task is on another run of it")
    if seen.container is ContainerState.RUNNING:
        return Decision(action=Action.ADOPT, why="the task already has a running container", announce=True)
    if seen.container is ContainerState.ENDED:
        return Decision(action=Action.NOTHING, why="it ran and ended: the exit path reports it")
    if seen.run is None:
        return Decision(action=Action.CLAIM, why="a task starts only once its run is claimed")
    if seen.run.phase == "ended":
        return Decision(action=Action.NOTHING, why="the task already ran on this node")
    if seen.run.phase == "running" and seen.container is None:
        return Decision(action=Action.REPORT_LOST,
                        why="the task's container disappeared from the engine (removed outside paiq?)")
    return Decision(action=Action.START, why="never started, or its start was cut short")


def _on_exit(seen: Seen) -> Decision:
    if seen.job is None:
        return Decision(action=Action.FORGET, why="a container of a deleted job ended")
    return Decision(action=Action.REPORT_EXIT, why="the task's container ended",
                    by_user=stopped_by_user(seen.job, seen.task.attempt, user_stop=seen.user_stop))


def _on_container(seen: Seen) -> Decision:
    if seen.container is ContainerState.CREATED:
        return Decision(action=Action.NOTHING, why="never started: a launch starts it")
    if seen.container is ContainerState.ENDED:
        return Decision(action=Action.FINISH, why="the task's container ended")
    job = seen.job
    if job is None or not is_current(job, seen.task.attempt):
        return Decision(action=Action.STOP, why="its job is over or gone",
                        by_user=stopped_by_user(job, seen.task.attempt, user_stop=seen.user_stop))
    if _other_run(job, seen.task):
        return Decision(action=Action.STOP, why="a run of the task that another run has replaced")
    task = _task(job, seen.task.role, seen.task.index)
    # The job can show the task waiting only because the status service has not yet taken in the start
    # this process sent: that start is not sent again (one whose publish failed is unmarked, so sent here).
    return Decision(action=Action.ADOPT, why="a running container of a current job",
                    announce=task is not None and task.state is TaskState.WAITING and not seen.announced)


def _on_placed(seen: Seen) -> Decision:
    job, run = seen.job, seen.run
    task = None if job is None else _task(job, seen.task.role, seen.task.index)
    if job is None or task is None or task.state.is_final:
        return Decision(action=Action.NOTHING, why="the task is over")
    if run is not None and run.phase == "ended":
        # Final jobs too: a leftover task whose exit report was lost would hold its resources forever.
        if seen.now_ms - (run.ended_ms or 0) > seen.stale_after_ms and run.exit_code is not None:
            return Decision(action=Action.RESEND_EXIT, why="its exit was reported but the job has not taken it in")
        return Decision(action=Action.NOTHING, why="it ran; its exit is on its way to the job")
    if job.state.is_final:
        return Decision(action=Action.NOTHING, why="nothing is launched for a job that is over")
    if task.state is TaskState.WAITING or (run is not None and run.phase == "running"):
        # Never launched, or a launch cut short: launch. Started once but its container is gone: the
        # launch looks again (this pass's listing may be older than its start) and reports that.
        return Decision(action=Action.RELAUNCH, why="a placed task that has no container")
    return Decision(action=Action.NOTHING, why="the job shows it running but it has no run: left alone")


def _task(job: JobRecord, role: str, index: int) -> TaskRecord | None:
    try:
        return job.tasks[job.task_slot(role, index)]
    except KeyError:
        return None
