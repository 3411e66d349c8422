"""Choosing victims: the cheapest whole jobs to stop so that one waiting job fits (the stages are in
:mod:`shared.scheduling.preemption`'s docstring)."""

from __future__ import annotations

import heapq
import zlib
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from shared.jobconfig.model import JobConfig
from shared.scheduling.placement import ClusterSnapshot, Plan, Unplaceable, place
from shared.scheduling.placement.checks import Ask
from shared.scheduling.placement.snapshot import ANY_GPU, Claim, NodeState
from shared.scheduling.preemption.eligibility import eligible
from shared.scheduling.preemption.values import (
    Candidate,
    Held,
    NoCode,
    NoPreemption,
    Preemption,
    Victim,
    Waiter,
    plural,
)
from shared.scheduling.vclusters import Resources


def choose_victims(snapshot: ClusterSnapshot, waiting: Waiter, running: Sequence[Candidate], *, seed: int,
                   max_victims: int = 16, max_simulations: int = 16) -> Preemption | NoPreemption:
    """The cheapest whole jobs to stop so ``waiting`` fits (see the module's stages), or why none."""
    ranking = _Ranking(waiting, running, seed)
    if ranking.in_flight:
        vcs = ", ".join(sorted({c.vc for c in ranking.in_flight}))
        return _none(waiting, "in_progress", f"preemption of {plural(len(ranking.in_flight), 'job')} of vc {vcs} "
                                             "in progress")
    sim = _Simulation(snapshot, waiting.config, seed, ranking.ranked)
    try:
        return _search(_Room(snapshot, waiting.config, ranking), sim, waiting, max_victims, max_simulations)
    finally:
        sim.restore()


# --- ranking -------------------------------------------------------------------------------------


@dataclass(slots=True)
class _Ranked:
    rank: int
    candidate: Candidate
    why: str
    held: list[tuple[NodeState, Held]]  # on the snapshot's nodes


class _Ranking:
    """The eligible candidates in rank order, produced a layer at a time: a layer is one (priority,
    borrowed or owned) group, the cheapest first. A node's cost is compared worst victim first, so no
    later layer can offer a cheaper node: layers are judged only when the cheaper ones are not enough."""

    def __init__(self, waiting: Waiter, running: Sequence[Candidate], seed: int) -> None:
        self.waiting, self.seed = waiting, seed
        groups: dict[tuple[int, bool], list[Candidate]] = {}
        self.in_flight: list[Candidate] = []  # being stopped for this very job already
        for c in running:
            groups.setdefault((c.priority, not c.borrowed_from), []).append(c)
            if c.stopping_for == waiting.job_id:
                self.in_flight.append(c)
        self.pending = [groups[key] for key in sorted(groups, reverse=True)]  # pop() gives the cheapest
        self.ranked: list[_Ranked] = []
        self.refused: Counter[str] = Counter()

    def next_layer(self) -> list[_Ranked] | None:
        """The next layer with an eligible job, ranked (youngest, fewest GPUs, seeded hash); None at the end."""
        while self.pending:
            rows = []
            for c in self.pending.pop():
                verdict = eligible(self.waiting, c)
                if not verdict.ok:
                    self.refused[verdict.reason] += 1
                    continue
                tie = zlib.crc32(f"{self.seed}:{c.job_id}".encode())
                rows.append(((-c.started_ms, c.gpus, tie, c.job_id), c, verdict.reason))
            if rows:
                rows.sort(key=lambda row: row[0])
                first = len(self.ranked)
                layer = [_Ranked(first + i, c, why, []) for i, (_, c, why) in enumerate(rows)]
                self.ranked.extend(layer)
                return layer
        return None


# --- node arithmetic: making room task by task -----------------------------------------------------


class _Room:
    """Per node: free + released - reserved CPUs, memory and GPUs of the job's type, and the eligible
    jobs on it (in rank order, their amounts there summed), costed in a heap for the current task's ask."""

    def __init__(self, snapshot: ClusterSnapshot, config: JobConfig, ranking: _Ranking) -> None:
        self.snapshot, self.states, self.by_id, self.ranking = snapshot, snapshot.states, snapshot.by_id, ranking
        self.kind = config.gpu_type or ANY_GPU
        self.avail: dict[int, list[int]] = {}  # only nodes whose amounts changed; the others read the snapshot
        self.on_node: dict[int, dict[int, list[int]]] = {}
        self.spans: list[dict[int, list[int]]] = []  # per rank: node pos -> amounts released there
        self.version = [0] * len(snapshot.states)
        self.chosen: set[int] = set()
        self.heap: list[tuple[tuple[int, ...], int, int]] = []
        self.ask: Ask | None = None

    def add(self, layer: list[_Ranked]) -> None:
        """Count a new layer's jobs on their nodes and re-cost those nodes."""
        kind, touched = self.kind, set[int]()
        for r in layer:
            span: dict[int, list[int]] = {}
            for h in r.candidate.holdings:
                node = self.by_id.get(h.node_id)
                if node is None:  # on a node the snapshot does not have (lost): frees nothing here
                    continue
                r.held.append((node, h))
                g = len(h.gpus) if kind is ANY_GPU else sum(1 for i in h.gpus if node.gpu_kinds.get(i) == kind)
                a = span.setdefault(node.pos, [0, 0, 0])
                a[0] += h.cpus
                a[1] += h.memory_mb
                a[2] += g
            self.spans.append(span)
            for pos, amounts in span.items():
                self.on_node.setdefault(pos, {})[r.rank] = amounts
            touched.update(span)
        if self.ask is not None:
            for pos in sorted(touched):
                self.version[pos] += 1
                self._push(pos)

    def at(self, pos: int) -> list[int]:
        a = self.avail.get(pos)
        if a is None:
            s = self.states[pos]
            a = self.avail[pos] = [s.free_cpus, s.free_memory_mb, s.gpu_count(self.kind)]
        return a

    def cost(self, pos: int, ask: Ask) -> tuple[int, ...] | None:
        """The new victims (ranks, most expensive first) that make room for ``ask`` on the node, or None."""
        a = self.avail.get(pos)
        if a is None:
            s = self.states[pos]
            c, m, g = s.free_cpus, s.free_memory_mb, s.gpu_count(self.kind)
        else:
            c, m, g = a
        if c >= ask.cpus and m >= ask.memory_mb and g >= ask.gpus:
            return ()
        picked: list[tuple[int, list[int]]] = []
        for rank, a in self.on_node.get(pos, {}).items():
            if rank in self.chosen:
                continue
            c, m, g = c + a[0], m + a[1], g + a[2]
            picked.append((rank, a))
            if c >= ask.cpus and m >= ask.memory_mb and g >= ask.gpus:
                break
        else:
            return None
        keep: list[int] = []
        for rank, a in reversed(picked):  # reprieve, most expensive first
            if c - a[0] >= ask.cpus and m - a[1] >= ask.memory_mb and g - a[2] >= ask.gpus:
                c, m, g = c - a[0], m - a[1], g - a[2]
            else:
                keep.append(rank)
        return tuple(keep)

    def _push(self, pos: int) -> None:
        assert self.ask is not None
        key = self.cost(pos, self.ask)
        if key is not None:
            heapq.heappush(self.heap, (key, pos, self.version[pos]))

    def start(self, ask: Ask) -> None:
        """A new role: the nodes that hold an eligible job, that changed, or that the snapshot's index
        says have enough of the task's scored resource (GPUs of the type, or CPUs) are costed for it."""
        self.ask, self.heap = ask, []
        index = self.snapshot.gpu_index.get(ask.gpu_kind) if ask.gpus else self.snapshot.cpu_index
        roomy = (p for group in index.groups_from(ask.gpus or ask.cpus, ascending=True) for p in group) if index else ()
        for pos in sorted({*self.on_node, *self.avail, *roomy}):
            self._push(pos)

    def room_for(self, ask: Ask) -> bool:
        """Reserve room for one more task of ``ask`` on its cheapest node, choosing the victims it needs;
        the next layer of candidates is brought in when no node can take it with those counted so far."""
        if ask is not self.ask:
            self.start(ask)
        while True:
            while self.heap:
                victims, pos, version = heapq.heappop(self.heap)
                if version != self.version[pos]:
                    continue
                touched = {pos}
                for rank in victims:
                    touched |= self.choose(rank)
                a = self.at(pos)
                a[0], a[1], a[2] = a[0] - ask.cpus, a[1] - ask.memory_mb, a[2] - ask.gpus
                for p in sorted(touched):
                    self.version[p] += 1
                    self._push(p)
                return True
            layer = self.ranking.next_layer()
            if layer is None:
                return False
            self.add(layer)

    def choose(self, rank: int) -> set[int]:
        self.chosen.add(rank)
        for pos, a in self.spans[rank].items():
            b = self.at(pos)
            b[0], b[1], b[2] = b[0] + a[0], b[1] + a[1], b[2] + a[2]
        return set(self.spans[rank])

    def prune(self) -> None:
        """Drop each victim (most expensive first) whose release no reserved task needs."""
        for rank in sorted(self.chosen, reverse=True):
            span = self.spans[rank]
            if all(self.at(p)[0] >= a[0] and self.at(p)[1] >= a[1] and self.at(p)[2] >= a[2]
                   for p, a in span.items()):
                self.chosen.discard(rank)
                for p, a in span.items():
                    b = self.at(p)
                    b[0], b[1], b[2] = b[0] - a[0], b[1] - a[1], b[2] - a[2]
                    self.version[p] += 1
                    if self.ask is not None:
                        self._push(p)


# --- simulation on the snapshot --------------------------------------------------------------------


@dataclass
class _Simulation:
    """The victims' holdings given back on the snapshot itself, placement run over it, all undone after."""

    snapshot: ClusterSnapshot
    config: JobConfig
    seed: int
    ranked: list[_Ranked]
    runs: int = 0
    released: dict[int, list[tuple[NodeState, Claim]]] = field(default_factory=dict)

    def release(self, rank: int) -> None:
        claims = []
        for node, h in self.ranked[rank].held:
            u = node.usage  # only what the snapshot counts as held is given back (then taken again)
            claim = Claim(h.cpus, h.memory_mb, tuple(g for g in h.gpus if g in u.gpus),
                          tuple(p for p in h.ports if p in u.ports))
            self.snapshot.give(node, claim)
            claims.append((node, claim))
        self.released[rank] = claims

    def retake(self, rank: int) -> None:
        for node, claim in reversed(self.released.pop(rank)):
            self.snapshot.take(node, claim)

    def hold_only(self, ranks: set[int]) -> None:
        for rank in sorted(set(self.released) - ranks, reverse=True):
            self.retake(rank)
        for rank in sorted(ranks - set(self.released)):
            self.release(rank)

    def place(self) -> Plan | Unplaceable:
        self.runs += 1
        return place(self.snapshot, self.config, seed=self.seed)

    def restore(self) -> None:
        self.hold_only(set())


def _search(room: _Room, sim: _Simulation, waiting: Waiter, max_victims: int,
            max_simulations: int) -> Preemption | NoPreemption:
    config = waiting.config
    asks = {r.name: Ask.of(r, config.gpu_type) for r in config.task_roles}
    failed = _make_room(room, waiting, asks, max_victims)
    if failed is not None:
        return failed
    while True:
        room.prune()
        sim.hold_only(room.chosen)
        result = sim.place()
        if isinstance(result, Plan):
            break
        if sim.runs >= max_simulations:
            return _bound(waiting, sim, f"no set of victims made it fit within {max_simulations} simulations")
        role_name = result.task.rpartition("[")[0]
        if not room.room_for(asks[role_name]):
            return _none(waiting, "short", f"no lower-priority or borrowed job frees enough: {result.reason}",
                         sim.runs)
    if not room.chosen:
        return _none(waiting, "fits", "it fits without preempting any job", sim.runs)
    plan = _prune_by_simulation(sim, room, result, max_simulations)
    if len(room.chosen) > max_victims:
        return _bound(waiting, sim, f"it would need {len(room.chosen)} victims, more than {max_victims} per pass")
    return _answer(waiting, sim, sorted(room.chosen), plan)


def _make_room(room: _Room, waiting: Waiter, asks: dict[str, Ask], max_victims: int) -> NoPreemption | None:
    """Room for every task of the job, roles in config order (as :func:`place` goes), or why not."""
    for role in waiting.config.task_roles:
        ask = asks[role.name]
        for index in range(role.task_number):
            if not room.room_for(ask):
                if not room.ranking.ranked:
                    return _no_candidates(waiting, room.ranking.refused)
                return _short(waiting, role.name, role.task_number - index, role.task_number, ask)
            if len(room.chosen) > 2 * max_victims:
                return _none(waiting, "bound", f"no preemption this pass: it would need more than {max_victims} "
                             "victims")
    return None


def _prune_by_simulation(sim: _Simulation, room: _Room, plan: Plan, max_simulations: int) -> Plan:
    """Victims on no node of the plan are tried together; then each, most expensive first. A victim is
    simulated only when, without its release, the nodes would still have slots for every role's tasks
    (counted per role over CPUs, memory and GPUs: a bound, so a hopeless try costs no placement)."""
    chosen = room.chosen
    used = {t.node_id for t in plan.tasks}
    aside = sorted((r for r in chosen if not any(n.id in used for n, _ in sim.ranked[r].held)), reverse=True)
    if aside and sim.runs < max_simulations:
        for rank in aside:
            sim.retake(rank)
        result = sim.place()
        if isinstance(result, Plan):
            chosen.difference_update(aside)
            plan = result
        else:
            for rank in reversed(aside):
                sim.release(rank)
    asks = [(Ask.of(r, sim.config.gpu_type), r.task_number) for r in sim.config.task_roles]
    for rank in sorted(chosen, reverse=True):
        if sim.runs >= max_simulations:
            break
        if not _may_spare(sim.snapshot, room, rank, asks):
            continue
        sim.retake(rank)
        result = sim.place()
        if isinstance(result, Plan):
            chosen.discard(rank)
            plan = result
        else:
            sim.release(rank)
    return plan


def _may_spare(snapshot: ClusterSnapshot, room: _Room, rank: int, asks: list[tuple[Ask, int]]) -> bool:
    """Whether, with victim ``rank`` kept running, the nodes still have a slot for every task of each role."""
    span = room.spans[rank]
    for ask, tasks in asks:
        index = snapshot.gpu_index.get(ask.gpu_kind) if ask.gpus else snapshot.cpu_index
        if index is None:
            return False
        states, groups = snapshot.states, index.groups_from(ask.gpus or ask.cpus, ascending=False)
        slots = sum(_slots(states[p], ask, span.get(p)) for g in groups for p in g)
        if slots < tasks:
            return False
    return True


def _slots(node: NodeState, ask: Ask, kept: list[int] | None) -> int:
    """How many tasks of ``ask`` fit the node's free amounts, less what a kept victim holds there."""
    c, m, g = node.free_cpus, node.free_memory_mb, node.gpu_count(ask.gpu_kind)
    if kept is not None:
        c, m, g = c - kept[0], m - kept[1], g - kept[2]
    n = min(c // ask.cpus, m // ask.memory_mb)
    return max(0, min(n, g // ask.gpus) if ask.gpus else n)


# --- answers ---------------------------------------------------------------------------------------


def _answer(waiting: Waiter, sim: _Simulation, ranks: list[int], plan: Plan) -> Preemption:
    victims = []
    slots: set[tuple[str, int]] = set()
    for rank in ranks:
        r = sim.ranked[rank]
        c = r.candidate
        victims.append(Victim(job_id=c.job_id, vc=c.vc, user=c.user, priority=c.priority, why=r.why, gpus=c.gpus,
                              cpus=sum(h.cpus for h in c.holdings), memory_mb=sum(h.memory_mb for h in c.holdings)))
        slots.update((h.node_id, g) for h in c.holdings for g in h.gpus)
    taken = {(t.node_id, g) for t in plan.tasks for g in t.gpus}
    config = waiting.config
    needed = Resources(cpus=sum(r.task_number * r.cpu_number for r in config.task_roles),
                       memory_mb=sum(r.task_number * r.memory_mb for r in config.task_roles), gpus=config.total_gpus)
    freed = Resources(cpus=sum(v.cpus for v in victims), memory_mb=sum(v.memory_mb for v in victims),
                      gpus=sum(v.gpus for v in victims))
    return Preemption(job_id=waiting.job_id, victims=tuple(victims), plan=plan, freed=freed, needed=needed,
                      unused_gpus=len(slots - taken), simulations=sim.runs)


def _none(waiting: Waiter, code: NoCode, reason: str, simulations: int = 0) -> NoPreemption:
    return NoPreemption(job_id=waiting.job_id, code=code, reason=reason, simulations=simulations)


def _bound(waiting: Waiter, sim: _Simulation, why: str) -> NoPreemption:
    return _none(waiting, "bound", f"no preemption this pass: {why}", sim.runs)


def _no_candidates(waiting: Waiter, refused: Counter[str]) -> NoPreemption:
    counts = "; ".join(f"{n} {why}" for why, n in sorted(refused.items()))
    return _none(waiting, "no_candidates", "no running job is of lower priority or on borrowed capacity"
                 + (f": {counts}" if counts else ""))


def _short(waiting: Waiter, role: str, short: int, of: int, ask: Ask) -> NoPreemption:
    each = ", ".join(x for x in (plural(ask.gpus, "GPU") if ask.gpus else "", plural(ask.cpus, "CPU"),
                                 f"{ask.memory_mb} MB") if x)
    return _none(waiting, "short", f"no lower-priority or borrowed job frees enough: {short} of "
                                   f"{plural(of, 'task')} of role {role} ({each} each) find no node")
