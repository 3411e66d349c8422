"""Preemption as a pure decision: which running jobs to stop so that one waiting job fits, or why none.

:func:`choose_victims` is called once per scheduling pass for a waiting job that did not fit. It answers
a :class:`Preemption` (the victims, whole jobs, each with why; the plan the job gets once they are gone;
what that frees against what the job needs) or a :class:`NoPreemption` with a code and a sentence.

The wiring, one stage after another:

1. Who may be a victim (:func:`eligible`, one small rule with its reason): a job of lower priority, or a
   job running on capacity the waiting job's VC lent (a borrower, when that VC reclaims). Never the
   job that preempted the waiting one (no loops), never a job already being stopped for another.
2. Rank them, cheapest first: lowest priority (``oppo`` first), borrowed before owned, youngest first
   (least work lost), fewest GPUs, then a hash of the job id seeded by the caller (ties are replayable,
   never the order the candidates came in).
3. Make room task by task over node arithmetic (free + released - reserved CPUs, memory and GPUs of the
   job's type): each task takes the node whose needed new victims are cheapest (compared worst victim
   first, then how many), and on that node victims are taken cheapest first and then reprieved most
   expensive first (kube-scheduler's way), so each node's set is minimal. Only nodes that hold eligible
   jobs or have room are looked at; a victim's release only re-costs the nodes it runs on.
4. Prune the set by arithmetic (drop a victim when every reserved task still fits without it).
5. Simulate before acting: release the victims' holdings on the snapshot and run :func:`place`; never
   answer victims for a job that would still not fit. When placement disagrees with the arithmetic
   (ports, its own order), room for one more task of the role it failed on is made and it runs again.
6. Prune by simulation, most expensive first (victims on no node of the plan first, together), within
   ``max_simulations``; a victim is only simulated when the nodes would still have a slot per task
   without it (a count per role), so hopeless tries cost no placement.

Candidates are judged a layer at a time (one priority and borrowed/owned group, cheapest first): a node's
cost is compared worst victim first, so a later layer never offers a cheaper node and is only brought in
when the earlier ones cannot make room. With mostly ``oppo`` victims, most running jobs are never ranked.

Bounded: at most ``max_victims`` victims are answered, the greedy gives up past twice that, and at most
``max_simulations`` placements run. The snapshot is changed while deciding and given back exactly
before returning, as :func:`place` does. Same inputs and seed, same answer, whatever the order of
``running``.
"""

from shared.scheduling.preemption.eligibility import eligible
from shared.scheduling.preemption.values import Candidate, Held, NoPreemption, Preemption, Verdict, Victim, Waiter
from shared.scheduling.preemption.victims import choose_victims

__all__ = ["Candidate", "Held", "NoPreemption", "Preemption", "Verdict", "Victim", "Waiter", "choose_victims",
           "eligible"]
