"""Borrowing between virtual clusters, as pure arithmetic over quotas and what runs.

A VC's quota is what it is guaranteed. Beyond it, a VC may borrow up to its ``borrowing`` limit
(percent of the cluster, per resource) out of what the other VCs leave idle: their unused quota less
what others already borrowed. Opportunistic (``oppo``) jobs count in no quota: they run on any idle
capacity and are the first to be preempted.

Which jobs borrow is decided from what runs, not stored: a VC over its quota borrows with its youngest
jobs (those started last, whose start took it past the quota), so as older ones end the borrowers
become owners again. Their capacity is lent by the VCs under their quota, which may take it back.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Literal

from pydantic import BaseModel, ConfigDict

from shared.jobconfig.priority import is_opportunistic, priority_of
from shared.records import JobRecord, holdings
from shared.scheduling.vclusters import Resources, VirtualCluster, limit, quota_problem, share_of

EPSILON = 1e-9
_WHAT = (("gpus", "GPUs"), ("cpus", "CPUs"), ("memory_mb", "MB of memory"))


class Admission(BaseModel):
    """Whether a job may start in its VC now as far as quotas go: within its quota, borrowing, or not."""

    model_config = ConfigDict(frozen=True)
    kind: Literal["within", "borrows", "refused"]
    reason: str = ""
    borrows: Resources = Resources()  # beyond the quota, when borrowing


def counts_in_quota(job: JobRecord) -> bool:
    return not is_opportunistic(priority_of(job.config))


def usage_of(job: JobRecord) -> Resources:
    """What the job's tasks hold now (those that hold resources: see :func:`shared.records.holdings`)."""
    used = Resources()
    for _, task, role in holdings([job]):
        used = used + Resources(cpus=role.cpu_number, memory_mb=role.memory_mb, gpus=len(task.gpus))
    return used


def quota_usage(jobs: Iterable[JobRecord]) -> dict[str, Resources]:
    """What counts against each VC's quota: its jobs' holdings, opportunistic jobs left out."""
    used: dict[str, Resources] = defaultdict(Resources)
    for job, task, role in holdings(j for j in jobs if counts_in_quota(j)):
        used[job.virtual_cluster] = used[job.virtual_cluster] + Resources(
            cpus=role.cpu_number, memory_mb=role.memory_mb, gpus=len(task.gpus))
    return used


def borrowed(vc: VirtualCluster, capacity: Resources, used: Resources) -> Resources:
    """How far the VC runs beyond its quota (0 per resource within it; a 100% quota never borrows)."""
    over = (used - limit(vc, capacity)).floor()
    return Resources(**{what: 0.0 if _pct(vc, what) >= 100 else getattr(over, what) for what, _ in _WHAT})


def idle_quota(vc: VirtualCluster, capacity: Resources, used: Resources) -> Resources:
    return (limit(vc, capacity) - used).floor()


def lendable(vcs: Mapping[str, VirtualCluster], capacity: Resources, used: Mapping[str, Resources],
             borrower: str) -> Resources:
    """What ``borrower`` may borrow from the others now: their idle quota less what others borrow."""
    idle, lent = Resources(), Resources()
    for name, vc in vcs.items():
        if name == borrower:
            continue
        u = used.get(name, Resources())
        idle = idle + idle_quota(vc, capacity, u)
        lent = lent + borrowed(vc, capacity, u)
    return (idle - lent).floor()


def admit(vc: VirtualCluster, capacity: Resources, used: Resources, request: Resources,
          lendable_now: Resources) -> Admission:
    """The quota side of starting ``request`` in ``vc`` (``used``: what counts against its quota now)."""
    problem = quota_problem(vc, capacity, used, request)
    if problem is None:
        return Admission(kind="within")
    over = borrowed(vc, capacity, used + request)
    may = share_of(vc.borrowing, capacity)
    if not any(getattr(may, what) > 0 for what, _ in _WHAT):
        return Admission(kind="refused", reason=problem)  # this VC does not borrow: the quota's own words
    for what, words in _WHAT:
        need, most = getattr(over, what), getattr(may, what)
        if need > most + EPSILON:
            return Admission(kind="refused", reason=(
                f"borrowing limit: virtual cluster {vc.name} would run {need:g} {words} beyond its quota, "
                f"{_pct_of(vc.borrowing, what):g}% of the cluster ({most:g}) is its borrowing limit"))
    for what, words in _WHAT:
        need, idle = getattr(over, what), getattr(lendable_now, what)
        if need > idle + EPSILON:
            return Admission(kind="refused", reason=(
                f"virtual cluster {vc.name} would borrow {need:g} {words} beyond its quota but the other "
                f"virtual clusters leave {idle:g} idle"))
    return Admission(kind="borrows", borrows=over)


def lenders(vcs: Mapping[str, VirtualCluster], capacity: Resources, used: Mapping[str, Resources]) -> tuple[str, ...]:
    """The VCs with idle quota: the ones whose capacity borrowers run on."""
    return tuple(sorted(name for name, vc in vcs.items()
                        if any(getattr(idle_quota(vc, capacity, used.get(name, Resources())), what) > EPSILON
                               for what, _ in _WHAT)))


def borrowers(jobs: Iterable[JobRecord], vcs: Mapping[str, VirtualCluster],
              capacity: Resources) -> dict[str, tuple[str, ...]]:
    """The running jobs that borrow, each with the VCs it borrows from (see the module's docstring)."""
    jobs = [j for j in jobs if counts_in_quota(j)]
    used = quota_usage(jobs)
    lending = lenders(vcs, capacity, used)
    out: dict[str, tuple[str, ...]] = {}
    by_vc: dict[str, list[tuple[int, str, Resources]]] = defaultdict(list)
    for job in jobs:
        by_vc[job.virtual_cluster].append((_started(job), job.id, usage_of(job)))
    for name, rows in by_vc.items():
        vc = vcs.get(name)
        if vc is None or not _over(borrowed(vc, capacity, used.get(name, Resources()))):
            continue
        total = Resources()
        over = False
        for _, job_id, u in sorted(rows):
            total = total + u
            over = over or _over(borrowed(vc, capacity, total))
            if over:
                out[job_id] = tuple(v for v in lending if v != name)
    return out


def borrowed_and_lent(vcs: Mapping[str, VirtualCluster], capacity: Resources,
                      used: Mapping[str, Resources]) -> dict[str, tuple[Resources, Resources]]:
    """Per VC: what it borrows, and what it lends (all borrowing spread over the lenders by their idle quota)."""
    borrowing = {n: borrowed(vc, capacity, used.get(n, Resources())) for n, vc in vcs.items()}
    idle = {n: idle_quota(vc, capacity, used.get(n, Resources())) for n, vc in vcs.items()}
    total_borrowed = sum(borrowing.values(), Resources())
    total_idle = sum(idle.values(), Resources())
    out = {}
    for n in vcs:
        lent = {what: (getattr(idle[n], what) * min(1.0, getattr(total_borrowed, what) / getattr(total_idle, what))
                       if getattr(total_idle, what) > EPSILON else 0.0) for what, _ in _WHAT}
        out[n] = (borrowing[n], Resources(**lent))
    return out


def _started(job: JobRecord) -> int:
    starts = [t.started_ms for t in job.tasks if t.started_ms is not None]
    return job.launched_ms or min(starts, default=job.queued_ms or job.created_ms)


def _over(r: Resources) -> bool:
    return any(getattr(r, what) > EPSILON for what, _ in _WHAT)


def _pct(vc: VirtualCluster, what: str) -> float:
    return _pct_of(vc.quota, what)


def _pct_of(q: object, what: str) -> float:
    return float(getattr(q, {"gpus": "gpus", "cpus": "cpus", "memory_mb": "memory"}[what]))
