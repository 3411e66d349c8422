"""Stopping task containers: SIGTERM, then SIGKILL after the grace period; the exit path reports them."""

from __future__ import annotations

import asyncio

from services.launcher.deps import LauncherDeps


async def stop_container(deps: LauncherDeps, container_id: str, *, by_user: bool) -> None:
    """SIGTERM, then SIGKILL after the grace period. ``by_user``: its exit is reported as -210
    (stopped by user) whatever code the signal left; the exit itself is reported by the exit path."""
    if by_user:
        deps.stopped_by_user.add(container_id)
    deps.stopping.add(container_id)
    try:
        await deps.driver.stop(container_id, deps.settings.stop_grace_seconds)
    finally:
        deps.stopping.discard(container_id)


async def stop_job_containers(deps: LauncherDeps, job_id: str, *, by_user: bool, attempt: int | None = None) -> int:
    """Stop every running container of ``job_id`` (of ``attempt`` only, when given) on this node; how many."""
    leftovers = [c for c in await deps.driver.list_managed(deps.node.node_id)
                 if c.running and c.labels.get("paiq.job") == job_id
                 and (attempt is None or c.labels.get("paiq.attempt") == str(attempt))]
    await asyncio.gather(*(stop_container(deps, c.id, by_user=by_user) for c in leftovers))
    return len(leftovers)
