"""What preemption decides over and answers: running jobs as candidates, the waiting job, the verdicts."""

from __future__ import annotations

from typing import Literal, NamedTuple

from pydantic import BaseModel, ConfigDict

from shared.jobconfig.model import JobConfig
from shared.jobconfig.priority import priority_of
from shared.records import JobRecord, holdings
from shared.scheduling.placement import Plan
from shared.scheduling.vclusters import Resources


class _Value(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Held(_Value):
    """What one task of a running job holds on its node."""

    node_id: str
    cpus: int
    memory_mb: int
    gpus: tuple[int, ...] = ()
    ports: tuple[int, ...] = ()


class Candidate(_Value):
    """A running job as preemption sees it. ``borrowed_from``: the VCs whose capacity it runs on beyond
    its own VC's quota (the caller decides; empty when within quota). ``stopping_for``: the job it is
    already being stopped for, while that preemption is in flight. ``holdings`` must be those the
    snapshot counts as used."""

    job_id: str
    vc: str
    user: str
    priority: int
    started_ms: int
    holdings: tuple[Held, ...]
    borrowed_from: tuple[str, ...] = ()
    stopping_for: str | None = None

    @property
    def borrowed(self) -> bool:
        return bool(self.borrowed_from)

    @property
    def gpus(self) -> int:
        return sum(len(h.gpus) for h in self.holdings)

    @classmethod
    def of(cls, job: JobRecord, *, priority: int | None = None, borrowed_from: tuple[str, ...] = (),
           stopping_for: str | None = None) -> Candidate:
        """From a job record: its tasks that hold resources; started when launched (or its first task)."""
        held = tuple(Held(node_id=str(t.node_id), cpus=r.cpu_number, memory_mb=r.memory_mb, gpus=t.gpus,
                          ports=tuple(p for ps in t.ports.values() for p in ps)) for _, t, r in holdings([job]))
        starts = [t.started_ms for t in job.tasks if t.started_ms is not None]
        return cls(job_id=job.id, vc=job.virtual_cluster, user=job.user,
                   priority=priority_of(job.config) if priority is None else priority,
                   started_ms=job.launched_ms or min(starts, default=job.created_ms), holdings=held,
                   borrowed_from=borrowed_from, stopping_for=stopping_for)


class Waiter(_Value):
    """The waiting job. ``lineage``: the jobs that preempted it (and, as the caller keeps it, theirs):
    never preempted back. ``reclaims``: it would run within its own VC's quota, so it may take back
    capacity its VC lent."""

    job_id: str
    vc: str
    priority: int
    config: JobConfig
    lineage: tuple[str, ...] = ()
    reclaims: bool = True

    @classmethod
    def of(cls, job: JobRecord, *, lineage: tuple[str, ...] = (), reclaims: bool = True) -> Waiter:
        return cls(job_id=job.id, vc=job.virtual_cluster, priority=priority_of(job.config), config=job.config,
                   lineage=lineage, reclaims=reclaims)


class Victim(_Value):
    job_id: str
    vc: str
    user: str
    priority: int
    why: str
    gpus: int
    cpus: int
    memory_mb: int


class Preemption(_Value):
    """Stop ``victims`` (in this order, cheapest first) and ``plan`` is where the job goes."""

    type: Literal["preempt"] = "preempt"
    job_id: str
    victims: tuple[Victim, ...]
    plan: Plan
    freed: Resources  # what the victims hold, all of it
    needed: Resources  # what the waiting job asks
    unused_gpus: int  # victims' GPUs the plan does not take: freed beyond need
    simulations: int

    @property
    def reason(self) -> str:
        names = ", ".join(f"{v.job_id} ({v.why})" for v in self.victims)
        return (f"preempting {plural(len(self.victims), 'job')}: {names}; frees {self.freed.gpus:g} GPUs for "
                f"{self.needed.gpus:g} needed, {self.unused_gpus} beyond need")


NoCode = Literal["fits", "in_progress", "no_candidates", "short", "bound"]


class NoPreemption(_Value):
    """No victims: it fits already, a preemption for it is in flight, no one may be stopped, stopping
    every eligible job would not be enough, or the bounds were reached."""

    type: Literal["none"] = "none"
    job_id: str
    code: NoCode
    reason: str
    simulations: int = 0


class Verdict(NamedTuple):
    ok: bool
    reason: str


def plural(n: int, what: str) -> str:
    return f"{n} {what}{'s' if n != 1 else ''}"
