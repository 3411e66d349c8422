"""What the launcher says about a task: its events (started, exited, progress), published so that a start
that could not be said is said again by the next pass, and its running container's output recorded (a debug
task's wrapper line announced as kept). Both the start (launch.py) and the end (finish.py) of a task, and the
reconcile pass, say things through here.
"""

from __future__ import annotations

import structlog

from services.launcher.container.spec import parse_debug_marker
from services.launcher.deps import LauncherDeps
from services.launcher.engine.driver import LogLine
from services.launcher.recorder import LogRecorder
from shared.events import (
    CloudEvent,
    TaskExited,
    TaskExitedData,
    TaskProgress,
    TaskProgressData,
    TaskStarted,
    TaskStartedData,
)
from shared.records import TaskSubState
from shared.taskref import TaskRef

log = structlog.get_logger("paiq.launcher")


def exited_event(key: TaskRef, node_id: str, code: int, reason: str, diagnostics: str = "",
                 container_id: str | None = None) -> TaskExited:
    return TaskExited(subject=key.job_id, data=TaskExitedData(
        **key.fields(), node_id=node_id, exit_code=code, reason=reason, diagnostics=diagnostics,
        container_id=container_id))


def started_event(key: TaskRef, node_id: str, container_id: str) -> TaskStarted:
    return TaskStarted(subject=key.job_id, data=TaskStartedData(**key.fields(), node_id=node_id,
                                                                container_id=container_id))


async def publish_with_starts(deps: LauncherDeps, events: list[CloudEvent]) -> None:
    """Publish events whose starts were marked said (``deps.work.started_announced``, done before any await
    once the container runs); if the publish fails, they are unmarked, so that the next pass says them."""
    if not await deps.publish(events):
        for event in events:
            if isinstance(event, TaskStarted):
                deps.work.started_unannounced(event.data.container_id)


def progress_event(key: TaskRef, node_id: str, sub_state: TaskSubState, detail: str = "",
                   kept_until_ms: int | None = None) -> TaskProgress:
    return TaskProgress(subject=key.job_id, data=TaskProgressData(
        **key.fields(), node_id=node_id, sub_state=sub_state, detail=detail, kept_until_ms=kept_until_ms))


def watch(deps: LauncherDeps, key: TaskRef, container_id: str, *, is_debug: bool) -> None:
    """Record the running container's output (once per container, however often asked)."""
    on_line = _Announce(deps, key, container_id) if is_debug else None
    deps.work.record(container_id, lambda: LogRecorder(deps.logs, deps.driver, key, container_id,
                                                       max_bytes=deps.options.task_log_max_bytes,
                                                       on_line=on_line).run())


class _Announce:
    """Turns the isDebug wrapper's stderr line into a ``task.progress`` (kept for debugging, until when)."""

    def __init__(self, deps: LauncherDeps, key: TaskRef, container_id: str) -> None:
        self._deps, self._key, self._container_id = deps, key, container_id

    def __call__(self, line: LogLine) -> None:
        if line.stream != "stderr":
            return
        marker = parse_debug_marker(line.text)
        if marker is None or not self._deps.work.first_kept_announcement(self._container_id):
            return
        code, seconds = marker
        until = line.ts_ns // 1_000_000 + seconds * 1000
        k = self._key
        event = progress_event(k, self._deps.node.node_id, TaskSubState.KEPT, kept_until_ms=until,
                               detail=f"the command exited with code {code}; isDebug keeps the container for "
                                      f"{seconds} s")
        log.info("isDebug: a failed task's container is kept for debugging", job_id=k.job_id, role=k.role,
                 index=k.index, exit_code=code, kept_seconds=seconds)
        self._deps.work.spawn(f"announce-kept-{self._container_id[:12]}", self._deps.publish([event]))
