"""The waiting queue as a pure decision: which queued jobs start now, and why each other one waits.

Each virtual cluster has its own queue, in one order (:func:`queue_key`): higher priority first
(OpenPAI's ``extras.hivedScheduler.jobPriorityClass``, :mod:`shared.jobconfig.priority`), then, among equal
priorities, the user whose running jobs hold the smallest dominant share of the VC's quota (DRF: the
largest of their GPU, CPU and memory fractions; the GPU fraction breaks ties), then the oldest. A job
starts when its VC's quota allows it and the placement finds room for every task. A later job may start
past one that is blocked (backfill) only while that blocked head of the queue has waited less than
``backfill_bound_ms``; after that the VC starts nothing else until its head starts, so a big gang job
is never starved by a stream of small ones. Every waiting job gets a reason (why it waits, never where:
its position is derived when read, :func:`queue_positions`, from the same order and the shares the last
pass used, so a head that starts rewrites nothing).

A job that could not start even on an idle cluster waits without blocking its queue; whether it could
is decided once per job and cluster shape (``never_fits``, which the caller keeps between passes), so
each waiting job is placed at most once per pass.
"""

from __future__ import annotations

import zlib
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import NamedTuple

from shared.jobconfig.priority import DEFAULT_CLASS, priority_of
from shared.records import JobRecord, holdings
from shared.scheduling.borrowing import Admission, admit, counts_in_quota, lendable
from shared.scheduling.placement import ClusterSnapshot, Plan, place
from shared.scheduling.vclusters import Resources, VirtualCluster, limit

DEFAULT_PRIORITY = DEFAULT_CLASS.number


@dataclass(frozen=True)
class Waiting:
    position: int
    reason: str
    may_preempt: bool = True  # False: it waits for its VC's head, or could not start even on an idle cluster


@dataclass(frozen=True)
class QueueDecision:
    start: list[tuple[JobRecord, Plan]]
    waiting: dict[str, Waiting]
    never_fits: dict[str, bool]  # by job id and attempt (see never_fits_key): to give the next pass


NEVER_FITS = "it cannot start even on an idle cluster"


def never_fits_key(job: JobRecord) -> str:
    return f"{job.id}#{job.attempt}"


def queued_since(job: JobRecord) -> int:
    return job.queued_ms or job.created_ms


class QueueEntry(NamedTuple):
    """What a queued job's place is decided from: all a read needs (the store projects just these)."""

    job_id: str
    vc: str
    since: int  # queued_since
    user: str = ""
    priority: int = DEFAULT_PRIORITY


class Share(NamedTuple):
    """A user's share of a VC's quota held by their running jobs: the dominant fraction, then the GPUs'."""

    dominant: float = 0.0
    gpus: float = 0.0


NO_SHARE = Share()
Shares = Mapping[str, Mapping[str, Share]]  # vc -> user -> share


def entry_of(job: JobRecord) -> QueueEntry:
    return QueueEntry(job.id, job.virtual_cluster, queued_since(job), job.user, priority_of(job.config))


def queue_key(entry: QueueEntry, shares: Shares) -> tuple[int, float, float, int, str]:
    """The one queue order: priority (higher first), the user's share (smaller first), age, id."""
    share = shares.get(entry.vc, {}).get(entry.user, NO_SHARE)
    return -entry.priority, share.dominant, share.gpus, entry.since, entry.job_id


def queue_positions(queued: Iterable[QueueEntry], shares: Shares | None = None) -> dict[str, int]:
    """1-based position of each queued job in its VC's queue: the order :func:`plan_queue` decides in,
    with the shares it used (``shares``, as the scheduler's last pass stored them)."""
    positions: dict[str, int] = {}
    seen: dict[str, int] = defaultdict(int)
    for entry in sorted(queued, key=lambda q: (q.vc, *queue_key(q, shares or {}))):
        seen[entry.vc] += 1
        positions[entry.job_id] = seen[entry.vc]
    return positions


def user_shares(jobs: Iterable[JobRecord], vcs: Mapping[str, VirtualCluster], capacity: Resources) -> dict[
        str, dict[str, Share]]:
    """Each user's share of each VC's quota, from what their jobs' tasks hold (:func:`holdings`)."""
    held: dict[tuple[str, str], Resources] = defaultdict(Resources)
    for job, task, role in holdings(jobs):
        held[job.virtual_cluster, job.user] = held[job.virtual_cluster, job.user] + Resources(
            cpus=role.cpu_number, memory_mb=role.memory_mb, gpus=len(task.gpus))
    shares: dict[str, dict[str, Share]] = defaultdict(dict)
    for (vc_name, user), used in sorted(held.items()):
        vc = vcs.get(vc_name)
        if vc is None:
            continue
        cap = limit(vc, capacity)
        fractions = {what: getattr(used, what) / getattr(cap, what)
                     for what in ("gpus", "cpus", "memory_mb") if getattr(cap, what) > 0}
        shares[vc_name][user] = Share(dominant=round(max(fractions.values(), default=0.0), 6),
                                      gpus=round(fractions.get("gpus", 0.0), 6))
    return dict(shares)


def shown_reason(reason: str, position: int | None, vc: str) -> str:
    """The reason as users read it: with the job's position in its queue while it is queued."""
    if position is None:
        return reason
    return f"position {position} in virtual cluster {vc}'s queue" + (f": {reason}" if reason else "")


def request_of(job: JobRecord) -> Resources:
    c = job.config
    return Resources(cpus=sum(r.task_number * r.cpu_number for r in c.task_roles),
                     memory_mb=sum(r.task_number * r.memory_mb for r in c.task_roles),
                     gpus=c.total_gpus)


def usage_by_vc(jobs: list[JobRecord]) -> dict[str, Resources]:
    """What the not-yet-ended tasks of placed jobs hold, per virtual cluster."""
    used: dict[str, Resources] = defaultdict(Resources)
    for job, task, role in holdings(jobs):
        used[job.virtual_cluster] = used[job.virtual_cluster] + Resources(
            cpus=role.cpu_number, memory_mb=role.memory_mb, gpus=len(task.gpus))
    return used


def capacity_of(snapshot: ClusterSnapshot) -> Resources:
    return Resources(cpus=sum(n.cpus for n in snapshot.nodes), memory_mb=sum(n.memory_mb for n in snapshot.nodes),
                     gpus=sum(len(n.gpus) for n in snapshot.nodes))


def plan_queue(snapshot: ClusterSnapshot, queued: list[JobRecord], vcs: dict[str, VirtualCluster],
               used: dict[str, Resources], now_ms: int, backfill_bound_ms: int,
               never_fits: Mapping[str, bool] | None = None, shares: Shares | None = None) -> QueueDecision:
    """Decide the queue; ``snapshot`` and ``used`` (what counts against each VC's quota:
    :func:`shared.scheduling.borrowing.quota_usage`) are updated with the jobs that start. ``never_fits``: verdicts
    of earlier passes over the same nodes (a job not in it is tried on the idle cluster once).
    ``shares``: the users' shares (:func:`user_shares`) that order equal priorities.

    Two rounds: first every VC's jobs that run within its quota (the owners of capacity first), then, in
    the one queue order across VCs, the jobs that would borrow beyond their VC's quota and the
    opportunistic ones (on what the first round left idle)."""
    planner = _Planner(snapshot, vcs, used, never_fits)
    by_vc: dict[str, list[JobRecord]] = defaultdict(list)
    for job in sorted(queued, key=lambda j: queue_key(entry_of(j), shares or {})):
        by_vc[job.virtual_cluster].append(job)
    for vc_name, jobs in sorted(by_vc.items()):
        planner.own_round(vc_name, jobs, now_ms, backfill_bound_ms)
    for job, position in sorted(planner.later, key=lambda row: queue_key(entry_of(row[0]), shares or {})):
        planner.second_round(job, position)
    return QueueDecision(start=planner.start, waiting=planner.waiting, never_fits=planner.verdicts)


class _Planner:
    def __init__(self, snapshot: ClusterSnapshot, vcs: dict[str, VirtualCluster], used: dict[str, Resources],
                 never_fits: Mapping[str, bool] | None) -> None:
        self.snapshot, self.vcs, self.used = snapshot, vcs, used
        self.capacity = capacity_of(snapshot)
        self.empty = ClusterSnapshot.build(snapshot.nodes, [])  # the same nodes with nothing running
        self.known = dict(never_fits or {})
        self.verdicts: dict[str, bool] = {}
        self.start: list[tuple[JobRecord, Plan]] = []
        self.waiting: dict[str, Waiting] = {}
        self.later: list[tuple[JobRecord, int]] = []  # borrowers and opportunistic jobs, with their positions

    def own_round(self, vc_name: str, jobs: list[JobRecord], now_ms: int, backfill_bound_ms: int) -> None:
        vc = self.vcs.get(vc_name)
        head: JobRecord | None = None  # the oldest job of this VC that could not start
        position = 0
        waiting_above: list[int] = []  # the priorities of the jobs ahead that wait (highest first)
        for job in jobs:
            position += 1
            priority = priority_of(job.config)
            if vc is None:
                self.waiting[job.id] = Waiting(position, f"virtual cluster {vc_name} no longer exists", False)
                continue
            if head is not None and now_ms - queued_since(head) > backfill_bound_ms:
                self.waiting[job.id] = Waiting(position, (
                    f"behind {head.name}, which has waited over {backfill_bound_ms // 1000}s: nothing else in "
                    "the VC starts before it"), False)
                continue
            key = never_fits_key(job)
            if self.known.get(key) and job.reason.startswith(NEVER_FITS):
                # Decided on this cluster shape already, and its reason stored: not placed again.
                self.verdicts[key] = True
                self.waiting[job.id] = Waiting(position, job.reason, False)
                continue
            admission = self.admission(vc, job)
            if admission.kind == "borrows" or (admission.kind == "within" and not counts_in_quota(job)):
                self.later.append((job, position))  # the second round
                continue
            if self.try_start(vc, job, admission, position):
                position -= 1  # it left the queue
            elif not self.waiting[job.id].reason.startswith(NEVER_FITS):
                head = head or job
                ahead = sum(1 for p in waiting_above if p > priority)
                if ahead:
                    wait = self.waiting[job.id]
                    self.waiting[job.id] = replace(wait, reason=f"higher priority jobs ahead: {ahead}; {wait.reason}")
                waiting_above.append(priority)

    def second_round(self, job: JobRecord, position: int) -> None:
        vc = self.vcs[job.virtual_cluster]
        self.try_start(vc, job, self.admission(vc, job), position)  # on what the jobs started since left

    def try_start(self, vc: VirtualCluster, job: JobRecord, admission: Admission, position: int) -> bool:
        why = admission.reason if admission.kind == "refused" else _place(self.snapshot, job)
        if isinstance(why, Plan):
            self.snapshot.hold(why, job.config)
            if counts_in_quota(job):
                self.used[job.virtual_cluster] = self.used.get(job.virtual_cluster, Resources()) + request_of(job)
            self.start.append((job, why))
            return True
        key = never_fits_key(job)
        hopeless = self.known[key] if key in self.known else self.never_fits(vc, job)
        self.verdicts[key] = hopeless
        if hopeless:
            # It would block its queue forever: it waits, saying why, but holds no one up.
            self.waiting[job.id] = Waiting(position, f"{NEVER_FITS}: {why}", False)
        else:
            self.waiting[job.id] = Waiting(position, why if counts_in_quota(job) else f"{OPPORTUNISTIC}: {why}")
        return False

    def admission(self, vc: VirtualCluster, job: JobRecord, used: Mapping[str, Resources] | None = None) -> Admission:
        if not counts_in_quota(job):
            return Admission(kind="within")
        used = self.used if used is None else used
        return admit(vc, self.capacity, used.get(vc.name, Resources()), request_of(job),
                     lendable(self.vcs, self.capacity, used, vc.name))

    def never_fits(self, vc: VirtualCluster, job: JobRecord) -> bool:
        """Whether the job could not start even with nothing running (borrowing all the others' quotas)."""
        return self.admission(vc, job, {}).kind == "refused" or not isinstance(_place(self.empty, job), Plan)


OPPORTUNISTIC = "opportunistic: it runs only on idle capacity"


def _place(snapshot: ClusterSnapshot, job: JobRecord) -> Plan | str:
    # Seeded from the job and attempt, so a placement can be replayed.
    result = place(snapshot, job.config, seed=placement_seed(job))
    return result if isinstance(result, Plan) else result.reason


def placement_seed(job: JobRecord) -> int:
    return zlib.crc32(f"{job.id}#{job.attempt}".encode())
