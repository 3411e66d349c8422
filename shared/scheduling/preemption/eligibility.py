"""Who may be stopped for a waiting job, and why (or why not, worded to be counted)."""

from __future__ import annotations

from shared.jobconfig.priority import is_opportunistic, priority_name
from shared.scheduling.preemption.values import Candidate, Verdict, Waiter


def eligible(waiting: Waiter, candidate: Candidate) -> Verdict:
    """Whether ``candidate`` may be stopped for ``waiting``, and why (or why not, worded to be counted).

    Quotas are guarantees: a VC's jobs within its quota are stopped only for a job of higher priority of
    the same VC. Opportunistic jobs count in no quota and are stopped for any other job; a job running on
    capacity the waiting job's VC lent is stopped when that VC takes it back (the waiting job would run
    within its own quota). An opportunistic job never preempts."""
    never = _never(waiting, candidate)
    if never:
        return Verdict(False, never)
    mine, theirs = priority_name(waiting.priority), priority_name(candidate.priority)
    why = []
    if is_opportunistic(candidate.priority):
        why.append(f"priority {theirs} < {mine} (opportunistic)")
    elif candidate.priority < waiting.priority and candidate.vc == waiting.vc:
        why.append(f"priority {theirs} < {mine} in vc {waiting.vc}")
    if waiting.vc in candidate.borrowed_from and waiting.reclaims:
        why.append(f"borrowed capacity of vc {waiting.vc}")
    if why:
        return Verdict(True, "; ".join(why))
    if waiting.vc in candidate.borrowed_from:
        return Verdict(False, f"borrow from vc {waiting.vc}, which cannot reclaim beyond its quota")
    if candidate.priority < waiting.priority:
        return Verdict(False, "run within the quota of another vc (priorities count inside a vc)")
    return Verdict(False, f"have priority {mine} or higher")


def _never(waiting: Waiter, candidate: Candidate) -> str:
    """Why ``candidate`` is out of the question whatever the priorities, or ""."""
    if candidate.job_id == waiting.job_id:
        return "is the waiting job itself"
    if candidate.stopping_for is not None:
        return "are already being stopped for a job"
    if candidate.job_id in waiting.lineage:
        return "preempted this job before (a job is never preempted back)"
    if is_opportunistic(waiting.priority):
        return "are not stopped for opportunistic work"
    return ""
