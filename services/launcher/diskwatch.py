"""The disk a task may fill: what each running task wrote to its container's own file system (its writable
layer), measured by the engine every ``PAIQ_TASK_DISK_CHECK_SECONDS``; a task past ``PAIQ_TASK_DISK_MB`` is
stopped, and its exit says why (-1206, :func:`services.launcher.exits.over_disk_limit`).

The engine's overlay file systems have no quota here (overlay2 on ext4 takes none), so the limit is enforced
after the fact: a task writing fast may pass it by what it writes in one period before it is stopped. Its
logs are capped apart (the engine's log file of a container, ``PAIQ_TASK_LOG_MAX_BYTES``).
"""

from __future__ import annotations

import structlog

from services.launcher.deps import LauncherDeps
from services.launcher.engine.tasklabels import TaskLabels
from services.launcher.exits import over_disk_limit
from services.launcher.stopping import stop_container

log = structlog.get_logger("paiq.launcher")


async def check_disks(deps: LauncherDeps) -> int:
    """One round: stop the node's tasks past the limit; how many were stopped now."""
    limit_mb = deps.options.disk_limit_mb
    if limit_mb <= 0:
        return 0
    stopped = 0
    containers = {c.id: c for c in await deps.driver.list_running(deps.node.node_id)}
    for container_id, written in (await deps.driver.written(deps.node.node_id)).items():
        reason = over_disk_limit(written, limit_mb)
        found = containers.get(container_id)
        task = TaskLabels.from_labels(found.labels) if found is not None else None
        if not reason or task is None or deps.work.is_stopping(container_id):
            continue
        await deps.logs.set_stopped_for(task.ref, reason)
        log.warning("stopping a task that filled its container's disk", job_id=task.job, role=task.role,
                    index=task.index, written_mib=written // (1024 * 1024), limit_mib=limit_mb)
        deps.work.spawn(f"stop-disk-{container_id[:12]}", stop_container(deps, container_id, by_user=False))
        stopped += 1
    return stopped
