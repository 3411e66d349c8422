"""Stopping task containers: SIGTERM, then SIGKILL after the grace period; the exit path reports them."""

from __future__ import annotations

import asyncio

from services.launcher.deps import LauncherDeps
from services.launcher.engine.tasklabels import TaskLabels


async def stop_container(deps: LauncherDeps, container_id: str, *, by_user: bool) -> None:
    """SIGTERM, then SIGKILL after the grace period. ``by_user``: its exit is reported as -210
    (stopped by user) whatever code the signal left; the exit itself is reported by the exit path."""
    if by_user:
        deps.work.mark_stopped_by_user(container_id)
    with deps.work.stopping(container_id):
        await deps.driver.stop(container_id, deps.settings.stop_grace_seconds)


async def stop_job_containers(deps: LauncherDeps, job_id: str, *, by_user: bool, attempt: int | None = None) -> int:
    """Stop every running container of ``job_id`` (of ``attempt`` only, when given) on this node; how many."""
    leftovers = [c for c in await deps.driver.list_managed(deps.node.node_id)
                 if c.running and _belongs(TaskLabels.from_labels(c.labels), job_id, attempt)]
    await asyncio.gather(*(stop_container(deps, c.id, by_user=by_user) for c in leftovers))
    return len(leftovers)


def _belongs(task: TaskLabels | None, job_id: str, attempt: int | None) -> bool:
    return task is not None and task.job == job_id and (attempt is None or task.attempt == attempt)
