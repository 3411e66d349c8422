"""Virtual cluster routes: quotas, borrowing limits, capacity, what is used, borrowed and lent, and jobs per
state; admins define them."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from services.submit.contract import answers
from services.submit.contract.answers import Message, answer
from services.submit.contract.bodies import read_json
from services.submit.contract.configschema import REF
from services.submit.contract.refusals import validated
from services.submit.contract.route import Body, Param, Reply, Route
from services.submit.deps import DEPS
from services.submit.errors import ApiError, shown
from services.submit.routes.access import require_admin
from shared.jobconfig.priority import priority_name
from shared.records import JobState
from shared.scheduling.borrowing import borrowed_and_lent, quota_usage
from shared.scheduling.queueing import NO_SHARE, queue_positions, usage_by_vc
from shared.scheduling.vclusters import DEFAULT_VC, Resources, VirtualCluster, limit, total_problem, with_default

# How pydantic's refusals of a virtual cluster are worded, besides services.submit.contract.refusals.RULES.
_WORDS = {
    "extra_forbidden": "is not a field of a virtual cluster (quota, borrowing, users, groups)",
    "extra_forbidden inside": "is not a resource (cpus, memory, gpus)",  # inside quota or borrowing
    "string_pattern_mismatch": "must be 1-64 letters, digits, '_' or '-'",
}


def _resources(r: Resources) -> answers.Resources:
    return answers.Resources(cpus=int(r.cpus), memory_mb=int(r.memory_mb), gpus=int(r.gpus))


def _amounts(r: Resources) -> answers.Amounts:
    """Shares of a quota need not be whole; rounded so that float noise (3.3000000000000003) is not sent."""
    return answers.Amounts(cpus=round(r.cpus, 3), memory_mb=round(r.memory_mb, 3), gpus=round(r.gpus, 3))


async def _summaries(request: web.Request) -> dict[str, answers.VirtualCluster]:
    store = request.app[DEPS].store
    vcs = with_default(await store.list_vcs())
    nodes = [n for n in await store.list_nodes() if not n.lost]
    capacity = Resources(cpus=sum(n.cpus for n in nodes), memory_mb=sum(n.memory_mb for n in nodes),
                         gpus=sum(len(n.gpus) for n in nodes))
    holding = await store.jobs_holding_resources()
    used = usage_by_vc(holding)
    borrowing = borrowed_and_lent(vcs, capacity, quota_usage(holding))
    counts = await store.job_counts_by_vc_and_state()
    return {
        vc.name: answers.VirtualCluster(
            name=vc.name, quota=vc.quota, borrowing=vc.borrowing, users=vc.users, groups=vc.groups,
            capacity=_resources(limit(vc, capacity)), used=_resources(used.get(vc.name, Resources())),
            borrowed=_amounts(borrowing[vc.name][0]), lent=_amounts(borrowing[vc.name][1]),
            jobs={state.value: counts.get(vc.name, {}).get(state.value, 0) for state in JobState})
        for vc in vcs.values()
    }


async def list_virtual_clusters(request: web.Request) -> web.Response:
    return answer(answers.VirtualClusters(await _summaries(request)))


async def get_virtual_cluster(request: web.Request) -> web.Response:
    name = request.match_info["vc"]
    summaries = await _summaries(request)
    if name not in summaries:
        raise ApiError("NoVirtualClusterError", f"virtual cluster {shown(name)} does not exist")
    return answer(summaries[name])


async def get_queue(request: web.Request) -> web.Response:
    """A VC's queued jobs in the order the scheduler decides in (:func:`shared.scheduling.queueing.queue_key`), each
    with its priority class, its user's share and why it waits."""
    name = request.match_info["vc"]
    store = request.app[DEPS].store
    if name not in with_default(await store.list_vcs()):
        raise ApiError("NoVirtualClusterError", f"virtual cluster {shown(name)} does not exist")
    queued = await store.queue_of_vc(name)
    shares = await store.queue_shares()
    positions = queue_positions((entry for entry, _, _ in queued), shares)
    jobs = sorted((answers.QueuedJob(
        position=positions[entry.job_id], user=entry.user, name=job_name, priority=priority_name(entry.priority),
        user_share=shares.get(name, {}).get(entry.user, NO_SHARE).dominant, waiting_since=entry.since,
        reason=reason) for entry, job_name, reason in queued), key=lambda j: j.position)
    return answer(answers.Queue(virtual_cluster=name, jobs=tuple(jobs)))


# What the default VC's body may not set: its quota is what the others leave, and it is open to everyone.
_FIXED_FOR_DEFAULT = ("quota", "users", "groups")


def _default_problem(body: dict[str, object]) -> str | None:
    """Why a body may not be ``default``'s: it sets more than the borrowing limit."""
    fixed = [k for k in _FIXED_FOR_DEFAULT if k in body]
    if not fixed:
        return None
    return (f"{', '.join(fixed)}: may not be set for the default virtual cluster: its quota is what the others "
            "leave and it is open to everyone; only its borrowing limit may be set, e.g. "
            "{\"borrowing\": {\"gpus\": 25}}")


async def put_virtual_cluster(request: web.Request) -> web.Response:
    """Admins create or replace a VC: ``{"quota": {"cpus": 25, "memory": 25, "gpus": 50}, "borrowing":
    {"gpus": 25}, "users": [...], "groups": [...]}`` (percentages of the cluster). ``default`` gets what the
    others leave: only its ``borrowing`` may be set (its stored quota is never read: see ``with_default``)."""
    await require_admin(request)
    name = request.match_info["vc"]
    body = await read_json(request)
    if not isinstance(body, dict):
        raise ApiError("InvalidParametersError", "the body must be a JSON object: {quota, borrowing, users, groups}")
    if "stopped" in body:
        raise ApiError("InvalidParametersError", "stopped: is set by PUT /api/v2/virtual-clusters/{vc}/status")
    problem = _default_problem(body) if name == DEFAULT_VC else None
    if problem:
        raise ApiError("InvalidParametersError", problem)
    vc = validated(VirtualCluster, {**body, "name": name}, words=_WORDS, prefix="invalid virtual cluster: ")
    store = request.app[DEPS].store
    others = [v for v in await store.list_vcs() if v.name != name]
    problem = total_problem([*others, vc])
    if problem:
        raise ApiError("InvalidParametersError", problem)
    await store.put_vc(vc)
    return answer(Message(message=f"virtual cluster {name} saved"))


async def delete_virtual_cluster(request: web.Request) -> web.Response:
    await require_admin(request)
    name = request.match_info["vc"]
    store = request.app[DEPS].store
    if name == DEFAULT_VC:
        raise ApiError("InvalidParametersError", "the default virtual cluster always exists")
    if await store.active_jobs_in_vc(name):
        raise ApiError("ConflictVirtualClusterError", f"virtual cluster {name} still has waiting or running jobs")
    if not await store.delete_vc(name):
        raise ApiError("NoVirtualClusterError", f"virtual cluster {shown(name)} does not exist")
    return answer(Message(message=f"virtual cluster {name} deleted"))


def _change() -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """The body of ``PUT /api/v1/virtual-clusters/{vc}`` (the model less the name its path gives), its quota,
    and the schema of that name."""
    schema = VirtualCluster.model_json_schema(ref_template=REF)
    quota = schema.pop("$defs")["Quota"]
    name = schema["properties"].pop("name")
    schema["properties"].pop("stopped")  # PUT /api/v2/virtual-clusters/{vc}/status's, not this body's
    schema.pop("required")
    schema.pop("title")
    return schema, quota, {k: v for k, v in name.items() if k != "title"}


VC_CHANGE, QUOTA, _NAME = _change()
_VC = Param("vc", "path")
_NEW_VC = Param("vc", "path", _NAME, "'default' takes only borrowing (its quota is what the others leave; 400)")

ROUTES = (
    Route("GET", "/api/v1/virtual-clusters", list_virtual_clusters, "virtual clusters: capacity, used, borrowed and "
          "lent, jobs per state", {200: Reply("", answers.VirtualClusters)}),
    Route("GET", "/api/v1/virtual-clusters/{vc}", get_virtual_cluster, "one virtual cluster",
          {200: Reply("", answers.VirtualCluster)}, (404,), params=(_VC,)),
    Route("GET", "/api/v1/virtual-clusters/{vc}/queue", get_queue, "paiq: a virtual cluster's queued jobs in the "
          "scheduler's order (priority class, then the users' shares of the quota, then age), each with why it waits",
          {200: Reply("", answers.Queue)}, (404,), params=(_VC,)),
    Route("PUT", "/api/v1/virtual-clusters/{vc}", put_virtual_cluster, "admin: create or replace a virtual cluster "
          "(quota and borrowing limit in % of the cluster, users, groups); 400 when the quotas would pass 100%, or "
          "for 'default' with more than borrowing", {200: Reply("saved", Message)}, (400, 401, 403, 408, 413),
          auth="person", params=(_NEW_VC,), body=Body("VirtualClusterChange")),
    Route("DELETE", "/api/v1/virtual-clusters/{vc}", delete_virtual_cluster, "admin: delete a virtual cluster "
          "without active jobs (not 'default')", {200: Reply("deleted", Message)}, (400, 401, 403, 404, 409),
          auth="person", params=(_VC,)),
)
