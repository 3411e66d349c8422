"""A task's container ended: save its log, say why it ended, report it, then remove the container.

The order matters for crash safety: the exit is recorded in the task's run and published before the
container is removed, so a launcher killed anywhere in between finds the container (or the run)
again on its next reconcile pass and reports the exit again; status ignores the duplicate.
"""

from __future__ import annotations

import asyncio
import contextlib

import structlog

from services.launcher.deps import LauncherDeps
from services.launcher.driver import ContainerExit, ContainerInfo, LogLine
from services.launcher.exits import classify_exit
from services.launcher.recorder import LogRecorder
from services.launcher.taskcontainer import LABEL_JOB, parse_debug_marker
from shared.events import TaskExited, TaskExitedData, TaskProgress, TaskProgressData, TaskStarted, TaskStartedData
from shared.launchspec import container_name
from shared.logstore import RunKey

log = structlog.get_logger("paiq.launcher")

DIAGNOSTIC_LINES = 20
RECORDER_DRAIN_SECONDS = 15


def run_key(labels: dict[str, str]) -> RunKey | None:
    """The task a container belongs to, from its labels (None: not a paiq task container)."""
    try:
        return RunKey(job_id=labels[LABEL_JOB], attempt=int(labels["paiq.attempt"]), role=labels["paiq.role"],
                      index=int(labels["paiq.index"]))
    except (KeyError, ValueError):
        return None


def exited_event(key: RunKey, node_id: str, code: int, reason: str, diagnostics: str = "",
                 container_id: str | None = None) -> TaskExited:
    return TaskExited(subject=key.job_id, data=TaskExitedData(
        job_id=key.job_id, attempt=key.attempt, role=key.role, index=key.index, node_id=node_id,
        exit_code=code, reason=reason, diagnostics=diagnostics, container_id=container_id))


def started_event(key: RunKey, node_id: str, container_id: str) -> TaskStarted:
    return TaskStarted(subject=key.job_id, data=TaskStartedData(
        job_id=key.job_id, attempt=key.attempt, role=key.role, index=key.index, node_id=node_id,
        container_id=container_id))


def watch(deps: LauncherDeps, key: RunKey, container_id: str, *, is_debug: bool) -> None:
    """Record the running container's output (once per container, however often asked)."""
    current = deps.recorders.get(container_id)
    if current is not None and not current.done():
        return
    on_line = _Announce(deps, key, container_id) if is_debug else None
    recorder = LogRecorder(deps.logs, deps.driver, key, container_id,
                           max_bytes=deps.options.task_log_max_bytes, on_line=on_line)
    deps.recorders[container_id] = asyncio.create_task(recorder.run(), name=f"logs-{container_id[:12]}")


class _Announce:
    """Turns the isDebug wrapper's stderr line into a ``task.progress`` (kept for debugging, until when)."""

    def __init__(self, deps: LauncherDeps, key: RunKey, container_id: str) -> None:
        self._deps, self._key, self._container_id = deps, key, container_id

    def __call__(self, line: LogLine) -> None:
        if line.stream != "stderr" or self._container_id in self._deps.kept_announced:
            return
        marker = parse_debug_marker(line.text)
        if marker is None:
            return
        code, seconds = marker
        self._deps.kept_announced.add(self._container_id)
        until = line.ts_ns // 1_000_000 + seconds * 1000
        k = self._key
        event = TaskProgress(subject=k.job_id, data=TaskProgressData(
            job_id=k.job_id, attempt=k.attempt, role=k.role, index=k.index, node_id=self._deps.node.node_id,
            sub_state="kept for debugging", kept_until_ms=until,
            detail=f"the command exited with code {code}; isDebug keeps the container for {seconds} s"))
        log.info("isDebug: a failed task's container is kept for debugging", job_id=k.job_id, role=k.role,
                 index=k.index, exit_code=code, kept_seconds=seconds)
        self._deps.spawn(f"announce-kept-{self._container_id[:12]}", self._deps.publish([event]))


async def finish(deps: LauncherDeps, ended: ContainerExit | ContainerInfo) -> None:
    """Report an ended container once, however many times its end is noticed (event, reconcile)."""
    current = deps.finishing.get(ended.id)
    if current is None:
        current = asyncio.create_task(_finish(deps, ended), name=f"finish-{ended.id[:12]}")
        deps.finishing[ended.id] = current
        current.add_done_callback(lambda _: deps.finishing.pop(ended.id, None))
    await asyncio.shield(current)


async def _save_log(deps: LauncherDeps, key: RunKey, container_id: str) -> None:
    recorder = deps.recorders.pop(container_id, None)
    if recorder is not None:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(recorder, RECORDER_DRAIN_SECONDS)
    # Catch up on what no recorder stored (the launcher was down, or the recorder failed).
    await LogRecorder(deps.logs, deps.driver, key, container_id, max_bytes=deps.options.task_log_max_bytes).run()
    await deps.logs.set_log_state(key, complete=True)


async def _finish(deps: LauncherDeps, ended: ContainerExit | ContainerInfo) -> None:
    key = run_key(ended.labels)
    if key is None:
        return
    job = await deps.store.get_job(key.job_id)
    if job is None:
        log.info("a container of a deleted job ended; removed without a report", job_id=key.job_id,
                 container=ended.id[:12])
        recorder = deps.recorders.pop(ended.id, None)
        if recorder is not None:
            recorder.cancel()
            await asyncio.gather(recorder, return_exceptions=True)
        await deps.logs.forget_run(key)
        await deps.driver.remove(ended.id)
        return
    launching = deps.launching.get(container_name(key.job_id, key.attempt, key.role, key.index))
    if launching is not None:
        await asyncio.wait({launching})  # it registers the recorder this container's log needs
    try:
        await _save_log(deps, key, ended.id)
    except Exception as e:  # the exit matters more than the last lines of its log
        log.warning("could not save the end of a task's log; reporting its exit anyway", job_id=key.job_id,
                    role=key.role, index=key.index, error=repr(e))
    stderr = await deps.driver.logs_tail(ended.id, DIAGNOSTIC_LINES, stderr_only=True)
    by_user = ended.id in deps.stopped_by_user or bool(job.attempt == key.attempt and job.stop_requested_by)
    verdict = classify_exit(
        exit_code=ended.exit_code if ended.exit_code is not None else -1, oom_killed=ended.oom_killed,
        memory_mb=int(ended.labels.get("paiq.memory_mb", "0") or 0), stopped_by_user=by_user, stderr_tail=stderr)
    diagnostics = stderr[-4000:]
    await deps.logs.set_ended(key, exit_code=verdict.code, reason=verdict.reason, diagnostics=diagnostics,
                              container_id=ended.id)
    await deps.publish([exited_event(key, deps.node.node_id, verdict.code, verdict.reason, diagnostics, ended.id)])
    log.info("task exited", job_id=key.job_id, role=key.role, index=key.index, exit_code=verdict.code,
             reason=verdict.reason or "succeeded", container=ended.id[:12])
    await deps.driver.remove(ended.id)
    deps.stopped_by_user.discard(ended.id)
    deps.kept_announced.discard(ended.id)
