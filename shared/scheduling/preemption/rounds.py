"""One round of preemption per scheduling pass: which waiting jobs may make room by stopping others, and
for whom victims are chosen this pass (bounded). Pure: records in, decisions out.

After the queue's placements, the jobs still waiting are looked at in the queue's order across VCs (the
caller's): a job for which a preemption is in flight waits for it ("preemption of 2 jobs of vc b in
progress"); the others, up to ``tries`` of them, get :func:`choose_victims` (one with nobody it may stop
is not counted, up to ``LOOKS_PER_TRY`` x ``tries`` looked at). What a job may take:

- within its VC's quota (it *reclaims*): capacity its VC lent to borrowers, opportunistic jobs, and
  lower-priority jobs of its own VC;
- beyond its quota, when lower-priority jobs of its own VC hold the quota it needs: those first (the
  cheapest that free enough quota: lowest priority, youngest), then room as above;
- borrowing (beyond its quota, within its borrowing limit): opportunistic jobs and lower-priority jobs
  of its own VC only; an opportunistic job takes nothing.

Each decision is simulated before it is answered (:func:`choose_victims`); once made, the round goes on
over the cluster as it will be (the victims gone, the job placed), so two jobs are never promised the
same room, and the victims are not taken again.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from shared.jobconfig.priority import is_opportunistic, priority_of
from shared.records import LINEAGE_MAX, JobRecord, SubState
from shared.scheduling.borrowing import admit, borrowed, borrowers, lendable
from shared.scheduling.placement import ClusterSnapshot, Plan, place
from shared.scheduling.placement.snapshot import Claim, NodeState
from shared.scheduling.preemption.eligibility import eligible
from shared.scheduling.preemption.values import Candidate, NoPreemption, Preemption, Victim, Waiter, plural
from shared.scheduling.preemption.victims import choose_victims
from shared.scheduling.queueing import capacity_of, placement_seed, request_of
from shared.scheduling.vclusters import Resources, VirtualCluster


@dataclass
class Round:
    """What a round decided: the preemptions to carry out, and the reason each waiting job it looked at
    now gives (those it did not change keep the queue's)."""

    preemptions: list[Preemption] = field(default_factory=list)
    reasons: dict[str, str] = field(default_factory=dict)
    tried: int = 0  # decisions that searched for victims (each bounded by its simulations)
    looked: int = 0  # waiting jobs looked at, those with no one to stop included


# Waiting jobs with nobody they may stop cost only an eligibility check over the running jobs: they do
# not use up a pass's tries (a job that may reclaim is not kept waiting behind them), but at most this
# many per try are looked at.
LOOKS_PER_TRY = 8


def candidates_of(holding: Sequence[JobRecord], vcs: Mapping[str, VirtualCluster],
                  capacity: Resources) -> list[Candidate]:
    """The running jobs preemption may consider: attempts not already ending, plus those ending because
    they were preempted (``stopping_for``: a preemption in flight)."""
    borrowing = borrowers(holding, vcs, capacity)
    out = []
    for job in holding:
        mark = job.preempted if job.preempted is not None and job.preempted.attempt == job.attempt else None
        ending = job.state.is_final or job.sub_state == SubState.RETRY_PENDING or job.stop_requested_by is not None
        if ending and mark is None:
            continue  # ending on its own: its room frees without anyone's decision
        out.append(Candidate.of(job, borrowed_from=borrowing.get(job.id, ()),
                                stopping_for=mark.by if mark else None))
    return out


def lineage_after(victim: JobRecord, waiting: JobRecord) -> tuple[str, ...]:
    """The victim's lineage once preempted by ``waiting``: never to preempt it (or its own preemptors) back."""
    seen = dict.fromkeys((*victim.preempted_by, waiting.id, *waiting.preempted_by))
    return tuple(seen)[-LINEAGE_MAX:]


def preemption_round(snapshot: ClusterSnapshot, waiting: Sequence[JobRecord], running: Sequence[Candidate],
                     vcs: Mapping[str, VirtualCluster], used: Mapping[str, Resources], *, tries: int,
                     max_victims: int = 16, max_simulations: int = 16) -> Round:
    """Decide this pass's preemptions (see the module's docstring). ``snapshot``: the cluster with this
    pass's placements held, given back as it was; ``used``: what counts against each VC's quota after them."""
    state = _State(snapshot, list(running), dict(used), vcs)
    result = Round()
    try:
        for job in waiting:
            in_flight = [c for c in state.running if c.stopping_for == job.id]
            if in_flight:
                vcs_of = ", ".join(sorted({c.vc for c in in_flight}))
                result.reasons[job.id] = f"preemption of {plural(len(in_flight), 'job')} of vc {vcs_of} in progress"
                continue
            if result.tried >= tries or result.looked >= LOOKS_PER_TRY * tries \
                    or is_opportunistic(priority_of(job.config)) or job.virtual_cluster not in vcs:
                continue
            answer = _try(state, job, max_victims, max_simulations)
            if answer is None:
                continue
            result.looked += 1
            if isinstance(answer, NoPreemption) and answer.code == "no_candidates":
                continue  # nobody it may stop: cheap (no placement ran), so not one of the pass's tries
            result.tried += 1
            if isinstance(answer, Preemption):
                result.preemptions.append(answer)
                result.reasons[job.id] = answer.reason
                state.carry_out(job, answer)
    finally:
        state.restore()
    return result


@dataclass
class _State:
    """The round's view: the snapshot with decided preemptions carried out (undone at the end)."""

    snapshot: ClusterSnapshot
    running: list[Candidate]
    used: dict[str, Resources]
    vcs: Mapping[str, VirtualCluster]
    changes: list[tuple[str, NodeState, Claim]] = field(default_factory=list)

    def release(self, candidate: Candidate) -> list[tuple[NodeState, Claim]]:
        claims = []
        for h in candidate.holdings:
            node = self.snapshot.by_id.get(h.node_id)
            if node is None:
                continue
            u = node.usage
            claim = Claim(h.cpus, h.memory_mb, tuple(g for g in h.gpus if g in u.gpus),
                          tuple(p for p in h.ports if p in u.ports))
            self.snapshot.give(node, claim)
            claims.append((node, claim))
        return claims

    def retake(self, claims: list[tuple[NodeState, Claim]]) -> None:
        for node, claim in reversed(claims):
            self.snapshot.take(node, claim)

    def carry_out(self, job: JobRecord, answer: Preemption) -> None:
        """The victims gone and the job placed, for the rest of the round."""
        victims = {v.job_id for v in answer.victims}
        for c in self.running:
            if c.job_id in victims:
                self.changes.extend(("give", n, claim) for n, claim in self.release(c))
                if c.vc in self.used and _counts(c):
                    self.used[c.vc] = (self.used[c.vc] - _usage(c)).floor()
        self.running = [c.model_copy(update={"stopping_for": job.id}) if c.job_id in victims else c
                        for c in self.running]
        for t in answer.plan.tasks:
            node = self.snapshot.by_id.get(t.node_id)
            if node is not None:
                role = next(r for r in job.config.task_roles if r.name == t.role)
                claim = Claim(role.cpu_number, role.memory_mb, t.gpus, tuple(p for ps in t.ports.values() for p in ps))
                self.snapshot.take(node, claim)
                self.changes.append(("take", node, claim))
        if not is_opportunistic(priority_of(job.config)):
            self.used[job.virtual_cluster] = self.used.get(job.virtual_cluster, Resources()) + answer.needed

    def restore(self) -> None:
        for kind, node, claim in reversed(self.changes):
            if kind == "give":
                self.snapshot.take(node, claim)
            else:
                self.snapshot.give(node, claim)
        self.changes.clear()


def _try(state: _State, job: JobRecord, max_victims: int, max_simulations: int) -> Preemption | NoPreemption | None:
    """Victims for one waiting job, or None when it may not preempt at all (its quota forbids it)."""
    vc = state.vcs[job.virtual_cluster]
    capacity = capacity_of(state.snapshot)
    used = state.used.get(vc.name, Resources())
    request = request_of(job)
    admission = admit(vc, capacity, used, request, lendable(state.vcs, capacity, state.used, vc.name))
    seed = placement_seed(job)
    if admission.kind != "refused":
        waiter = Waiter.of(job, lineage=job.preempted_by, reclaims=admission.kind == "within")
        return choose_victims(state.snapshot, waiter, state.running, seed=seed, max_victims=max_victims,
                              max_simulations=max_simulations)
    waiter = Waiter.of(job, lineage=job.preempted_by, reclaims=True)
    short = borrowed(vc, capacity, used + request)
    freeing = _quota_victims(waiter, state.running, short, seed, max_victims)
    if not freeing:
        return None
    claims = [claim for c, _ in freeing for claim in state.release(c)]
    try:
        ids = {c.job_id for c, _ in freeing}
        others = [c for c in state.running if c.job_id not in ids]
        answer = choose_victims(state.snapshot, waiter, others, seed=seed,
                                max_victims=max(1, max_victims - len(freeing)), max_simulations=max_simulations)
        if isinstance(answer, NoPreemption) and answer.code == "fits":
            plan = place(state.snapshot, job.config, seed=seed)
            if not isinstance(plan, Plan):
                return answer
            return _with_quota_victims(waiter, freeing, plan, (), answer.simulations)
        if isinstance(answer, Preemption):
            kept = _needed(freeing, answer, short, vc.name)
            return _with_quota_victims(waiter, kept, answer.plan, answer.victims, answer.simulations,
                                       answer.unused_gpus)
        return answer
    finally:
        state.retake(claims)


def _quota_victims(waiter: Waiter, running: Sequence[Candidate], short: Resources, seed: int,
                   max_victims: int) -> list[tuple[Candidate, str]]:
    """The cheapest lower-priority jobs of the waiter's own VC whose holdings free ``short`` of its quota
    (lowest priority, youngest, fewest GPUs, seeded tie), then reprieved most expensive first; [] when
    all of them would not be enough."""
    rows = []
    for c in running:
        if c.vc != waiter.vc or not _counts(c):
            continue
        verdict = eligible(waiter, c)
        if verdict.ok:
            rows.append(((c.priority, -c.started_ms, c.gpus, zlib.crc32(f"{seed}:{c.job_id}".encode()), c.job_id),
                         c, f"{verdict.reason}: frees its quota"))
    rows.sort(key=lambda row: row[0])
    chosen: list[tuple[Candidate, str]] = []
    freed = Resources()
    for _, c, why in rows:
        if _covers(freed, short) or len(chosen) >= max_victims:
            break
        chosen.append((c, why))
        freed = freed + _usage(c)
    if not _covers(freed, short):
        return []
    for row in reversed(list(chosen)):
        if _covers(freed - _usage(row[0]), short):
            chosen.remove(row)
            freed = freed - _usage(row[0])
    return chosen


def _needed(freeing: list[tuple[Candidate, str]], answer: Preemption, short: Resources,
            vc: str) -> list[tuple[Candidate, str]]:
    """The quota victims still needed once ``answer``'s victims are stopped too (those of the same VC free
    its quota as well): one on no node of the plan is dropped, most expensive first, while the rest
    still free ``short``."""
    on_plan = {t.node_id for t in answer.plan.tasks}
    freed = sum((_usage(c) for c, _ in freeing), Resources()) + sum(
        (Resources(cpus=v.cpus, memory_mb=v.memory_mb, gpus=v.gpus) for v in answer.victims
         if v.vc == vc and not is_opportunistic(v.priority)), Resources())
    kept = list(freeing)
    for row in reversed(freeing):
        c = row[0]
        if not any(h.node_id in on_plan for h in c.holdings) and _covers(freed - _usage(c), short):
            kept.remove(row)
            freed = freed - _usage(c)
    return kept


def _with_quota_victims(waiter: Waiter, freeing: list[tuple[Candidate, str]], plan: Plan,
                        more: tuple[Victim, ...], simulations: int, more_unused: int = 0) -> Preemption:
    victims = tuple(Victim(job_id=c.job_id, vc=c.vc, user=c.user, priority=c.priority, why=why, gpus=c.gpus,
                           cpus=sum(h.cpus for h in c.holdings), memory_mb=sum(h.memory_mb for h in c.holdings))
                    for c, why in freeing) + more
    slots = {(h.node_id, g) for c, _ in freeing for h in c.holdings for g in h.gpus}
    config = waiter.config
    needed = Resources(cpus=sum(r.task_number * r.cpu_number for r in config.task_roles),
                       memory_mb=sum(r.task_number * r.memory_mb for r in config.task_roles), gpus=config.total_gpus)
    freed = Resources(cpus=sum(v.cpus for v in victims), memory_mb=sum(v.memory_mb for v in victims),
                      gpus=sum(v.gpus for v in victims))
    taken = {(t.node_id, g) for t in plan.tasks for g in t.gpus}
    return Preemption(job_id=waiter.job_id, victims=victims, plan=plan, freed=freed, needed=needed,
                      unused_gpus=len(slots - taken) + more_unused, simulations=simulations)


def _covers(freed: Resources, short: Resources) -> bool:
    return freed.gpus >= short.gpus - 1e-9 and freed.cpus >= short.cpus - 1e-9 \
        and freed.memory_mb >= short.memory_mb - 1e-9


def _usage(c: Candidate) -> Resources:
    return Resources(cpus=sum(h.cpus for h in c.holdings), memory_mb=sum(h.memory_mb for h in c.holdings),
                     gpus=c.gpus)


def _counts(c: Candidate) -> bool:
    return not is_opportunistic(c.priority)
