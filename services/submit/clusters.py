"""Virtual cluster routes: capacity, what is used, and jobs per state."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from services.submit.deps import DEPS
from services.submit.errors import ApiError
from shared.records import JobState


async def _summaries(request: web.Request) -> dict[str, dict[str, Any]]:
    store = request.app[DEPS].store
    nodes = [n for n in await store.list_nodes() if not n.lost]
    capacity = {"cpus": sum(n.cpus for n in nodes), "memoryMB": sum(n.memory_mb for n in nodes),
                "gpus": sum(len(n.gpus) for n in nodes)}
    used: dict[str, dict[str, int]] = {}
    for job in await store.jobs_holding_resources():
        u = used.setdefault(job.virtual_cluster, {"cpus": 0, "memoryMB": 0, "gpus": 0})
        roles = {r.name: r for r in job.config.task_roles}
        for task in job.tasks:
            if task.state.is_final or task.node_id is None or task.role not in roles:
                continue
            u["cpus"] += roles[task.role].cpu_number
            u["memoryMB"] += roles[task.role].memory_mb
            u["gpus"] += len(task.gpus)
    counts = await store.job_counts_by_vc_and_state()
    names = {"default", *counts}
    return {
        vc: {
            "name": vc,
            "capacity": capacity,
            "used": used.get(vc, {"cpus": 0, "memoryMB": 0, "gpus": 0}),
            "jobs": {state.value: counts.get(vc, {}).get(state.value, 0) for state in JobState},
        }
        for vc in sorted(names)
    }


async def list_virtual_clusters(request: web.Request) -> web.Response:
    return web.json_response(await _summaries(request))


async def get_virtual_cluster(request: web.Request) -> web.Response:
    name = request.match_info["vc"]
    summaries = await _summaries(request)
    if name not in summaries:
        raise ApiError("NoVirtualClusterError", f"virtual cluster {name} does not exist")
    return web.json_response(summaries[name])


def add_cluster_routes(app: web.Application) -> None:
    app.router.add_get("/api/v1/virtual-clusters", list_virtual_clusters)
    app.router.add_get("/api/v1/virtual-clusters/{vc}", get_virtual_cluster)
