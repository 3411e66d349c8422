"""Preemption: eligibility, victim order, borrowed reclaim, no loops, simulate-before-acting, pruning,
determinism and bounds. Clusters of 8-GPU nodes; running jobs are given by where their tasks sit."""

from __future__ import annotations

import random
from collections.abc import Sequence

import pytest

from shared.jobconfig.priority import PRIORITIES, PriorityClass
from shared.records import NodeRecord
from shared.scheduling.placement import ClusterSnapshot, NodeUsage
from shared.scheduling.preemption import Candidate, Held, NoPreemption, Preemption, Waiter, choose_victims, eligible
from tests.unit.factories import make_config, make_job, make_node, make_task, role_dict

pytestmark = pytest.mark.unit

OPPO, TEST, PROD, CRIT = (PRIORITIES[c] for c in (PriorityClass.OPPO, PriorityClass.TEST, PriorityClass.PROD,
                                                  PriorityClass.CRIT))
T0 = 1_700_000_000_000


def nodes(count: int, gpus: int = 8) -> list[NodeRecord]:
    return [make_node(f"n{i}", cpus=64, memory_mb=512 * 1024, gpus=["V100"] * gpus) for i in range(count)]


def job(job_id: str, *tasks: tuple[str, Sequence[int]], priority: int = TEST, started_s: int = 0,
        borrowed_from: tuple[str, ...] = (), stopping_for: str | None = None, vc: str = "a") -> Candidate:
    """A running job (of the waiting job's VC unless said); each task is (node, GPU indices) and takes 2
    CPUs and 4 GB per GPU (1 and 1 GB without)."""
    held = tuple(Held(node_id=node, cpus=2 * len(g) or 1, memory_mb=4096 * len(g) or 1024, gpus=tuple(g))
                 for node, g in tasks)
    return Candidate(job_id=job_id, vc=vc, user="bob", priority=priority, started_ms=T0 + started_s * 1000,
                     holdings=held, borrowed_from=borrowed_from, stopping_for=stopping_for)


def cluster(node_records: list[NodeRecord], running: Sequence[Candidate]) -> ClusterSnapshot:
    usage = {n.id: NodeUsage() for n in node_records}
    for c in running:
        for h in c.holdings:
            u = usage[h.node_id]
            u.cpus += h.cpus
            u.memory_mb += h.memory_mb
            u.gpus.update(h.gpus)
            u.ports.update(h.ports)
    return ClusterSnapshot(tuple(node_records), usage)


def waiter(tasks: int = 1, gpus: int = 8, cls: str = "prod", vc: str = "a", lineage: tuple[str, ...] = (),
           reclaims: bool = True, name: str = "boss") -> Waiter:
    config = make_config(role_dict("main", taskNumber=tasks, gpuNumber=gpus, cpuNumber=2 * gpus or 1,
                                   memoryMB=4096 * gpus or 1024),
                         jobName=name, virtualCluster=vc, extras={"hivedScheduler": {"jobPriorityClass": cls}})
    return Waiter.of(make_job(config, user="carol"), lineage=lineage, reclaims=reclaims)


WHOLE = tuple(range(8))
LOW, HIGH = (0, 1, 2, 3), (4, 5, 6, 7)


def decide(node_count: int, running: Sequence[Candidate], w: Waiter | None = None, *, seed: int = 0,
           max_victims: int = 16) -> Preemption | NoPreemption:
    snapshot = cluster(nodes(node_count), running)
    before = {n.id: (n.usage.cpus, n.usage.memory_mb, sorted(n.usage.gpus)) for n in snapshot.states}
    answer = choose_victims(snapshot, w or waiter(), running, seed=seed, max_victims=max_victims)
    after = {n.id: (n.usage.cpus, n.usage.memory_mb, sorted(n.usage.gpus)) for n in snapshot.states}
    assert after == before, "the snapshot is given back as it was"
    return answer


def victims(answer: Preemption | NoPreemption) -> list[str]:
    assert isinstance(answer, Preemption), answer
    return [v.job_id for v in answer.victims]


# --- eligibility -----------------------------------------------------------------------------------


@pytest.mark.parametrize(("w", "c", "ok", "reason"), [
    (waiter(cls="prod"), job("x", priority=TEST), True, "priority test < prod in vc a"),
    (waiter(cls="prod"), job("x", priority=OPPO), True, "priority oppo < prod (opportunistic)"),
    (waiter(cls="test"), job("x", priority=OPPO, vc="b"), True, "priority oppo < test (opportunistic)"),
    (waiter(cls="test"), job("x", priority=TEST), False, "have priority test or higher"),
    (waiter(cls="test"), job("x", priority=PROD), False, "have priority test or higher"),
    (waiter(cls="prod"), job("x", priority=TEST, vc="b"), False,
     "run within the quota of another vc (priorities count inside a vc)"),
    (waiter(cls="test", vc="a"), job("x", priority=PROD, vc="b", borrowed_from=("a",)), True,
     "borrowed capacity of vc a"),
    (waiter(cls="prod", vc="a"), job("x", priority=TEST, vc="b", borrowed_from=("a",)), True,
     "borrowed capacity of vc a"),
    (waiter(cls="prod", vc="a"), job("x", priority=OPPO, vc="b", borrowed_from=("a",)), True,
     "priority oppo < prod (opportunistic); borrowed capacity of vc a"),
    (waiter(cls="test", vc="c"), job("x", priority=PROD, vc="b", borrowed_from=("a",)), False,
     "have priority test or higher"),
    (waiter(cls="prod", vc="c"), job("x", priority=TEST, vc="b", borrowed_from=("a",)), False,
     "run within the quota of another vc (priorities count inside a vc)"),
    (waiter(cls="test", vc="a", reclaims=False), job("x", priority=PROD, vc="b", borrowed_from=("a",)), False,
     "borrow from vc a, which cannot reclaim beyond its quota"),
    (waiter(cls="oppo", vc="a"), job("x", priority=OPPO, vc="b", borrowed_from=("a",)), False,
     "are not stopped for opportunistic work"),
    (waiter(cls="prod", lineage=("x",)), job("x", priority=TEST), False,
     "preempted this job before (a job is never preempted back)"),
    (waiter(cls="prod"), job("x", priority=TEST, stopping_for="other"), False,
     "are already being stopped for a job"),
    (waiter(cls="prod", name="boss"), job("carol~boss", priority=TEST), False, "is the waiting job itself"),
])
def test_eligibility(w: Waiter, c: Candidate, ok: bool, reason: str) -> None:
    assert tuple(eligible(w, c)) == (ok, reason)


# --- victim order ------------------------------------------------------------------------------------


@pytest.mark.parametrize(("cheaper", "dearer"), [
    (job("cheap", ("n0", WHOLE), priority=OPPO), job("dear", ("n1", WHOLE), priority=TEST)),
    (job("cheap", ("n0", WHOLE), priority=TEST), job("dear", ("n1", WHOLE), priority=PROD)),
    (job("cheap", ("n0", WHOLE), borrowed_from=("c",)), job("dear", ("n1", WHOLE))),  # borrowed before owned
    (job("cheap", ("n0", WHOLE), started_s=100), job("dear", ("n1", WHOLE), started_s=10)),  # youngest first
    (job("cheap", ("n0", WHOLE), priority=OPPO, started_s=0), job("dear", ("n1", WHOLE), started_s=100)),
])
def test_the_cheapest_job_is_the_victim(cheaper: Candidate, dearer: Candidate) -> None:
    for running in ([cheaper, dearer], [dearer, cheaper]):
        assert victims(decide(2, running, waiter(cls="crit"))) == [cheaper.job_id]


def test_fewest_gpus_when_all_else_is_equal() -> None:
    # The job needs 4 GPUs: half of n0 is a crit job, the other half a test job; n1 is one 8-GPU test job.
    running = [job("crit", ("n0", LOW), priority=CRIT), job("four", ("n0", HIGH)), job("eight", ("n1", WHOLE))]
    answer = decide(2, running, waiter(gpus=4))
    assert victims(answer) == ["four"]
    assert isinstance(answer, Preemption) and answer.unused_gpus == 0


def test_oppo_jobs_are_the_first_victims() -> None:
    # Eight nodes of test jobs and four of oppo jobs: a 4-node gang takes only oppo jobs.
    running = [job(f"t{i}", (f"n{i}", WHOLE), started_s=1000) for i in range(8)]
    running += [job(f"o{i}", (f"n{8 + i}", WHOLE), priority=OPPO) for i in range(4)]
    assert sorted(victims(decide(12, running, waiter(tasks=4)))) == ["o0", "o1", "o2", "o3"]


def test_victims_come_cheapest_first_with_why() -> None:
    running = [job("t", ("n0", WHOLE), started_s=5), job("o", ("n1", WHOLE), priority=OPPO),
               job("b", ("n2", WHOLE), priority=PROD, vc="b", borrowed_from=("a",))]
    answer = decide(3, running, waiter(tasks=3, cls="prod", vc="a"))
    assert isinstance(answer, Preemption)
    assert [(v.job_id, v.why) for v in answer.victims] == [
        ("o", "priority oppo < prod (opportunistic)"), ("t", "priority test < prod in vc a"),
        ("b", "borrowed capacity of vc a")]
    assert answer.freed.gpus == 24 and answer.needed.gpus == 24 and answer.unused_gpus == 0
    assert len(answer.plan.tasks) == 3


# --- borrowed reclaim --------------------------------------------------------------------------------


def test_the_owner_reclaims_borrowed_capacity_whatever_its_priority() -> None:
    running = [job("borrower", ("n0", WHOLE), priority=PROD, vc="b", borrowed_from=("a",)),
               job("own", ("n1", WHOLE), vc="b")]
    assert victims(decide(2, running, waiter(cls="test", vc="a"))) == ["borrower"]


def test_another_vc_does_not_reclaim_what_it_did_not_lend() -> None:
    running = [job("borrower", ("n0", WHOLE), priority=PROD, vc="b", borrowed_from=("a",))]
    answer = decide(1, running, waiter(cls="test", vc="c"))
    assert isinstance(answer, NoPreemption) and answer.code == "no_candidates"
    assert answer.reason == ("no running job is of lower priority or on borrowed capacity: "
                             "1 have priority test or higher")


# --- no loops ------------------------------------------------------------------------------------------


def test_a_job_is_never_preempted_back() -> None:
    # "x" preempted the waiting job before: it is not touched, though of lower priority; "y" is.
    running = [job("x", ("n0", WHOLE), priority=OPPO), job("y", ("n1", WHOLE))]
    assert victims(decide(2, running, waiter(lineage=("x",)))) == ["y"]
    answer = decide(1, running[:1], waiter(lineage=("x",)))
    assert isinstance(answer, NoPreemption) and answer.code == "no_candidates"
    assert "preempted this job before" in answer.reason


def test_a_preemption_in_flight_is_waited_for() -> None:
    w = waiter()
    running = [job("x", ("n0", WHOLE), stopping_for=w.job_id, vc="b", borrowed_from=("a",)), job("y", ("n1", WHOLE))]
    answer = decide(2, running, w)
    assert isinstance(answer, NoPreemption) and answer.code == "in_progress"
    assert answer.reason == "preemption of 1 job of vc b in progress"


def test_a_job_being_stopped_for_another_is_not_taken_again() -> None:
    running = [job("x", ("n0", WHOLE), priority=OPPO, stopping_for="someone~else"), job("y", ("n1", WHOLE))]
    assert victims(decide(2, running)) == ["y"]


# --- simulate before acting --------------------------------------------------------------------------


def test_never_preempts_for_a_job_that_would_still_not_fit() -> None:
    # Two 8-GPU tasks: n0 can be freed, n1 holds a crit job.
    running = [job("o", ("n0", WHOLE), priority=OPPO), job("c", ("n1", WHOLE), priority=CRIT)]
    answer = decide(2, running, waiter(tasks=2))
    assert isinstance(answer, NoPreemption) and answer.code == "short"
    assert answer.reason == ("no lower-priority or borrowed job frees enough: 1 of 2 tasks of role main "
                             "(8 GPUs, 16 CPUs, 32768 MB each) find no node")


def test_a_job_that_fits_needs_no_preemption() -> None:
    answer = decide(2, [job("o", ("n0", WHOLE), priority=OPPO)])
    assert isinstance(answer, NoPreemption) and answer.code == "fits"


def test_free_room_is_used_before_any_victim() -> None:
    # Three tasks: n2 is free, so only two nodes need freeing.
    running = [job("o1", ("n0", WHOLE), priority=OPPO), job("o2", ("n1", WHOLE), priority=OPPO),
               job("o3", ("n3", WHOLE), priority=OPPO, started_s=50)]
    answer = decide(4, running, waiter(tasks=3))
    chosen = victims(answer)
    assert chosen[0] == "o3" and len(chosen) == 2 and chosen[1] in ("o1", "o2"), "the youngest, then one by the seed"
    assert isinstance(answer, Preemption) and answer.unused_gpus == 0


# --- pruning -------------------------------------------------------------------------------------------


def test_two_halves_or_one_whole_node_frees_no_more_than_needed() -> None:
    # A 4-GPU task: one of the two 4-GPU jobs on n0, not the 8-GPU job on n1 (same priority and age).
    running = [job("half1", ("n0", LOW)), job("half2", ("n0", HIGH)), job("whole", ("n1", WHOLE))]
    for seed in range(5):
        answer = decide(2, running, waiter(gpus=4), seed=seed)
        assert isinstance(answer, Preemption)
        assert victims(answer) in (["half1"], ["half2"]) and answer.unused_gpus == 0


def test_a_job_spanning_two_nodes_makes_a_cheaper_victim_unneeded() -> None:
    # Two 4-GPU tasks. "o" (oppo) is cheapest, but "w" alone frees 4 GPUs on both nodes: "o" is pruned.
    running = [job("o", ("n0", LOW), priority=OPPO), job("w", ("n0", HIGH), ("n1", LOW)),
               job("c", ("n1", HIGH), priority=CRIT)]
    answer = decide(2, running, waiter(tasks=2, gpus=4))
    assert victims(answer) == ["w"]
    assert isinstance(answer, Preemption) and answer.unused_gpus == 0 and answer.freed.gpus == 8


# --- determinism and bounds ----------------------------------------------------------------------------


def _busy(n: int, rng: random.Random) -> list[Candidate]:
    """Every node full of 1-, 2- and 4-GPU jobs of random priority and age."""
    running = []
    for i in range(n):
        at = 0
        while at < 8:
            size = rng.choice([s for s in (1, 2, 4) if at + s <= 8])
            running.append(job(f"j{i}-{at}", (f"n{i}", range(at, at + size)), started_s=rng.randrange(3),
                               priority=rng.choice([OPPO, TEST, TEST, PROD, CRIT])))
            at += size
    return running


def test_same_seed_same_victims_whatever_the_candidates_order() -> None:
    rng = random.Random(7)
    running = _busy(12, rng)
    first = decide(12, running, waiter(tasks=3, cls="crit"), seed=42)
    for _ in range(5):
        shuffled = list(running)
        rng.shuffle(shuffled)
        assert decide(12, shuffled, waiter(tasks=3, cls="crit"), seed=42) == first
    assert isinstance(first, Preemption)


def test_ties_are_broken_by_the_seed() -> None:
    running = [job(f"t{i}", (f"n{i}", WHOLE)) for i in range(8)]
    chosen = {victims(decide(8, running, seed=seed))[0] for seed in range(20)}
    assert len(chosen) > 1, "equal jobs: the seed decides, not the order they came in"


def test_at_most_max_victims() -> None:
    # Freeing a node takes its eight 1-GPU jobs.
    running = [job(f"j{i}-{g}", (f"n{i}", (g,))) for i in range(2) for g in range(8)]
    assert len(victims(decide(2, running, max_victims=8))) == 8
    answer = decide(2, running, max_victims=7)
    assert isinstance(answer, NoPreemption) and answer.code == "bound"
    assert answer.reason == "no preemption this pass: it would need 8 victims, more than 7 per pass"


def test_candidate_of_a_job_record() -> None:
    config = make_config(role_dict("main", taskNumber=2, gpuNumber=2, cpuNumber=4, memoryMB=2048), jobName="r",
                         extras={"hivedScheduler": {"jobPriorityClass": "oppo"}})
    record = make_job(config, tasks=[make_task("main", 0, node_id="n0", gpus=(0, 1), ports={"ssh": (20001,)}),
                                     make_task("main", 1, node_id="n1", gpus=(2, 3))])
    c = Candidate.of(record, borrowed_from=("a",))
    assert (c.priority, c.gpus, c.borrowed) == (OPPO, 4, True)
    assert c.holdings[0] == Held(node_id="n0", cpus=4, memory_mb=2048, gpus=(0, 1), ports=(20001,))
