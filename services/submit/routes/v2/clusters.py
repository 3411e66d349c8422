"""OpenPAI v1.8's /api/v2 virtual clusters, storages and SKU types over paiq's own models: a VC is paiq's
(quota and borrowing in % of the cluster, users, groups), shown in OpenPAI v1.8's VC shape; a storage is the
operator's (:mod:`shared.storageconfig`); a SKU is a node's GPU type with the CPUs and memory each GPU of it
comes with."""

from __future__ import annotations

import re
from typing import Literal

import structlog
from aiohttp import web

from services.submit.contract import answers
from services.submit.contract.route import Body, ModelBody, Param, Reply, Route
from services.submit.contract.v2.users import (
    SkuType,
    SkuTypes,
    Storage,
    Storages,
    StorageSummary,
    V2Resources,
    V2VirtualCluster,
    V2VirtualClusters,
    VcDone,
    VcStatusChange,
    v2_answer,
)
from services.submit.deps import DEPS
from services.submit.errors import ApiError, shown
from services.submit.routes import clusters
from services.submit.routes.access import principal_of, require_admin
from services.submit.routes.v2.users import storages
from shared.records import ACTIVE_JOB_STATES, NodeRecord
from shared.scheduling.vclusters import DEFAULT_VC
from shared.storageconfig import StorageConfig

log = structlog.get_logger("paiq.submit.v2.clusters")


def _resources(r: answers.Resources) -> V2Resources:
    return V2Resources(cpu=r.cpus, memory=r.memory_mb, gpu=r.gpus, v_cores=r.cpus, gp_us=r.gpus)


def _percent(part: float, whole: float) -> float:
    return round(100 * part / whole, 3) if whole else 0.0


def vc_status(stopped: bool, jobs: dict[str, int]) -> Literal["RUNNING", "STOPPED", "DRAINING"]:
    """OpenPAI's (YARN's) queue state: a stopped VC drains while jobs it took are still waiting or running."""
    if not stopped:
        return "RUNNING"
    return "DRAINING" if any(jobs.get(state, 0) for state in ACTIVE_JOB_STATES) else "STOPPED"


def vc_v2(vc: answers.VirtualCluster, gpu_total: int, *, stopped: bool = False) -> V2VirtualCluster:
    """paiq's VC in OpenPAI v1.8's shape: ``capacity`` its GPU quota (%), ``maxCapacity`` with its borrowing
    limit, ``usedCapacity`` the GPUs it uses (% of the cluster's); guaranteed and total: its quota's worth;
    ``status`` as OpenPAI's YARN queues showed it."""
    total = _resources(vc.capacity)
    return V2VirtualCluster(capacity=vc.quota.gpus, used_capacity=_percent(vc.used.gpus, gpu_total),
                            max_capacity=min(100.0, vc.quota.gpus + vc.borrowing.gpus), dedicated=False,
                            resources_used=_resources(vc.used), resources_guaranteed=total, resources_total=total,
                            status=vc_status(stopped, vc.jobs))


async def _v2_summaries(request: web.Request) -> dict[str, V2VirtualCluster]:
    summaries = await clusters._summaries(request)
    stopped = {vc.name for vc in await request.app[DEPS].store.list_vcs() if vc.stopped}
    gpu_total = sum(s.capacity.gpus for s in summaries.values())
    return {name: vc_v2(s, gpu_total, stopped=name in stopped) for name, s in summaries.items()}


async def list_vcs(request: web.Request) -> web.Response:
    await principal_of(request)
    return v2_answer(V2VirtualClusters(await _v2_summaries(request)))


async def get_vc(request: web.Request) -> web.Response:
    await principal_of(request)
    name = request.match_info["vc"]
    found = (await _v2_summaries(request)).get(name)
    if found is None:
        raise ApiError("NoVirtualClusterError", f"virtual cluster {shown(name)} does not exist")
    return v2_answer(found)


async def put_vc(request: web.Request) -> web.Response:
    """paiq's VC body (quota, borrowing, users, groups), as ``PUT /api/v1/virtual-clusters/{vc}``; OpenPAI
    v1.8's answer."""
    await require_admin(request)
    await clusters.put_virtual_cluster(request)
    name = request.match_info["vc"]
    return v2_answer(VcDone(status=201, message=f"Update vc: {name} to capacity: success"), status=201)


async def delete_vc(request: web.Request) -> web.Response:
    await require_admin(request)
    await clusters.delete_virtual_cluster(request)
    name = request.match_info["vc"]
    return v2_answer(VcDone(status=201, message=f"Remove vc: {name} success"), status=201)


VC_STATUS = ModelBody(VcStatusChange)
_VC_NAME = re.compile(r"[A-Za-z0-9_\-]{1,64}")  # paiq's VC names (OpenPAI's had no '-')


async def put_vc_status(request: web.Request) -> web.Response:
    """Stop a VC (it takes no new jobs; those it holds go on) or set it running again. As OpenPAI v1.8's
    router: the name is checked first (400; 403 for ``default``, whose status no one changes), then the caller
    (401, 403 for an application token), the body (400), that they are an admin (403), and that the VC
    exists (404)."""
    name = request.match_info["vc"]
    if not _VC_NAME.fullmatch(name):
        raise ApiError("InvalidParametersError", "VC name should only contain alpha-numeric, '_' and '-' characters")
    if name == DEFAULT_VC:
        raise ApiError("ForbiddenUserError", "Update operation to default vc isn't allowed")
    principal = await principal_of(request)
    asked = await VC_STATUS.read(request)
    if not principal.admin:
        raise ApiError("ForbiddenUserError", "Non-admin is not allow to do this operation.")
    stopped = asked.vc_status == "stopped"
    if not await request.app[DEPS].store.set_vc_stopped(name, stopped):
        raise ApiError("NoVirtualClusterError", f"Vc {name} not found, can't {'stop' if stopped else 'active'}")
    log.info("virtual cluster stopped" if stopped else "virtual cluster running again", vc=name, by=principal.user)
    verb = "Stop" if stopped else "Activate"
    return v2_answer(VcDone(status=201, message=f"{verb} virtual cluster {name} successfully."), status=201)


def _summary(s: StorageConfig) -> StorageSummary:
    return StorageSummary(name=s.name, share=True, volume_name=s.name)


async def list_storages(request: web.Request) -> web.Response:
    principal = await principal_of(request)
    configs = await storages(request)
    return v2_answer(Storages(storages=tuple(_summary(s) for s in configs.usable_by(principal.user,
                                                                                     principal.groups))))


async def get_storage(request: web.Request) -> web.Response:
    principal = await principal_of(request)
    name = request.match_info["storage"]
    config = (await storages(request)).get(name)
    if config is None:
        raise ApiError("NoStorageError", f"Storage {shown(name)} is not found.")
    if not config.allows(principal.user, principal.groups):
        raise ApiError("ForbiddenUserError", f"User {principal.user} is not allowed to access {name}.")
    return v2_answer(Storage(**dict(_summary(config)), type="hostPath",
                             data={"hostPath": config.host_path, "mountPath": config.mount_path},
                             read_only=config.read_only, mount_options=()))


def sku_types(nodes: list[NodeRecord]) -> dict[str, SkuType]:
    """Each GPU type's unit: one GPU and the CPUs and memory every node of that type gives each of its GPUs
    (the least such node's share); nodes without GPUs as ``CPU``: one CPU and its memory."""
    out: dict[str, SkuType] = {}
    for node in nodes:
        by_type: dict[str, int] = {}
        for gpu in node.gpus:
            by_type[gpu.type] = by_type.get(gpu.type, 0) + 1
        if not by_type:
            unit = SkuType(gpu=0, cpu=1, memory=node.memory_mb // max(1, node.cpus))
            out["CPU"] = min(out.get("CPU", unit), unit, key=lambda u: u.memory)
            continue
        count = len(node.gpus)
        for kind in by_type:
            unit = SkuType(gpu=1, cpu=node.cpus // count, memory=node.memory_mb // count)
            known = out.get(kind)
            out[kind] = unit if known is None else SkuType(gpu=1, cpu=min(known.cpu, unit.cpu),
                                                           memory=min(known.memory, unit.memory))
    return dict(sorted(out.items()))


async def get_sku_types(request: web.Request) -> web.Response:
    await principal_of(request)
    deps = request.app[DEPS]
    vc = request.query.get("vc")
    if vc is not None and vc not in await clusters._summaries(request):
        raise ApiError("NoVirtualClusterError", f"Cannot get sku types for virtual cluster {shown(vc)}.")
    nodes = [n for n in await deps.store.list_nodes() if not n.lost]
    return v2_answer(SkuTypes(sku_types(nodes)))


_VC = Param("vc", "path")
_STORAGE = Param("storage", "path")

ROUTES = (
    Route("GET", "/api/v2/virtual-clusters", list_vcs, "virtual clusters in OpenPAI v1.8's shape (capacity, "
          "maxCapacity, usedCapacity in % of the cluster's GPUs; resources used, guaranteed, total)",
          {200: Reply("", V2VirtualClusters)}, (401,), auth="token"),
    Route("GET", "/api/v2/virtual-clusters/{vc}", get_vc, "one virtual cluster", {200: Reply("", V2VirtualCluster)},
          (401, 404), auth="token", params=(_VC,)),
    Route("PUT", "/api/v2/virtual-clusters/{vc}", put_vc, "admin: create or replace a virtual cluster (paiq's "
          "body: quota and borrowing in % of the cluster, users, groups)", {201: Reply("saved", VcDone)},
          (400, 401, 403, 408, 413), auth="person", params=(_VC,), body=Body("VirtualClusterChange")),
    Route("DELETE", "/api/v2/virtual-clusters/{vc}", delete_vc, "admin: delete a virtual cluster without active "
          "jobs (not 'default')", {201: Reply("deleted", VcDone)}, (400, 401, 403, 404, 409), auth="person",
          params=(_VC,)),
    Route("PUT", "/api/v2/virtual-clusters/{vc}/status", put_vc_status, "admin: stop a virtual cluster (it takes "
          "no new jobs: 403 to a submission; its queued and running jobs go on) or set it running again; not "
          "'default' (403)", {201: Reply("changed", VcDone)}, (400, 401, 403, 404, 408, 413), auth="person",
          params=(_VC,), body=VC_STATUS),
    Route("GET", "/api/v2/storages", list_storages, "the storages the caller may use",
          {200: Reply("", Storages)}, (401,), auth="token"),
    Route("GET", "/api/v2/storages/{storage}", get_storage, "one storage (403 for one the caller may not use)",
          {200: Reply("", Storage)}, (401, 403, 404), also={404: ("NoStorageError",)}, auth="token",
          params=(_STORAGE,)),
    Route("GET", "/api/v2/cluster/sku-types", get_sku_types, "each GPU type's unit: one GPU with its share of "
          "its node's CPUs and memory (MB); 'CPU' for nodes without GPUs", {200: Reply("", SkuTypes)}, (401, 404),
          auth="token", params=(Param("vc", "query", description="a virtual cluster (404 when unknown)"),)),
)
