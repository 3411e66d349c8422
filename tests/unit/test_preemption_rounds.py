"""A pass's preemption round: reclaiming lent capacity, oppo jobs first, quota victims, no victims across
VC quotas, preemptions in flight, the bound on tries, two waiters never promised the same room,
determinism, no loops, the candidates read from job records, and the snapshot given back as it was.

Clusters of 8-GPU nodes (64 CPUs, 512 GiB); a task takes 2 CPUs and 4 GiB per GPU. Running jobs are
records whose tasks sit where said; waiting jobs are records too, so the round sees what the scheduler
gives it (:func:`candidates_of`, :func:`quota_usage`)."""

from __future__ import annotations

import random
from collections.abc import Sequence

import pytest

from shared.records import LINEAGE_MAX, JobRecord, JobState, NodeRecord, PreemptedBy, SubState, TaskState
from shared.scheduling.borrowing import quota_usage
from shared.scheduling.placement import ClusterSnapshot
from shared.scheduling.preemption import Preemption
from shared.scheduling.preemption.rounds import Round, candidates_of, lineage_after, preemption_round
from shared.scheduling.queueing import capacity_of
from shared.scheduling.vclusters import Quota, VirtualCluster, with_default
from tests.unit.factories import make_config, make_job, make_node, make_task, role_dict

pytestmark = pytest.mark.unit

T0 = 1_700_000_000_000
HALF = Quota(cpus=50, memory=50, gpus=50)
WHOLE = tuple(range(8))
LOW, HIGH = (0, 1, 2, 3), (4, 5, 6, 7)
TWO_VCS = with_default([VirtualCluster(name="a", quota=HALF, borrowing=HALF),
                        VirtualCluster(name="b", quota=HALF, borrowing=HALF)])
ONE_VC = with_default([])  # default: the whole cluster


def nodes(count: int) -> list[NodeRecord]:
    return [make_node(f"n{i}", cpus=64, memory_mb=512 * 1024, gpus=["V100"] * 8) for i in range(count)]


def running(name: str, vc: str, *tasks: tuple[str, Sequence[int]], priority: str = "test", started_s: int = 0,
            **update: object) -> JobRecord:
    """bob's job ``name`` running in ``vc``: one task per (node, GPUs), all of the same size."""
    cfg = make_config(role_dict("main", taskNumber=len(tasks), gpuNumber=len(tasks[0][1]),
                                cpuNumber=2 * len(tasks[0][1]), memoryMB=4096 * len(tasks[0][1])),
                      jobName=name, virtualCluster=vc, extras={"hivedScheduler": {"jobPriorityClass": priority}})
    job = make_job(cfg, user="bob", state=JobState.RUNNING, tasks=[
        make_task("main", i, TaskState.RUNNING, node_id=node, gpus=g) for i, (node, g) in enumerate(tasks)])
    return job.model_copy(update={"sub_state": SubState.RUNNING, "launched_ms": T0 + started_s * 1000, **update})


def waiting(name: str, vc: str, *, priority: str = "prod", tasks: int = 1, gpus: int = 8,
            preempted_by: tuple[str, ...] = ()) -> JobRecord:
    """carol's queued job ``name``."""
    cfg = make_config(role_dict("main", taskNumber=tasks, gpuNumber=gpus, cpuNumber=2 * gpus, memoryMB=4096 * gpus),
                      jobName=name, virtualCluster=vc, extras={"hivedScheduler": {"jobPriorityClass": priority}})
    return make_job(cfg, user="carol", state=JobState.WAITING).model_copy(update={"preempted_by": preempted_by})


def mark(by: str, attempt: int = 0) -> PreemptedBy:
    return PreemptedBy(attempt=attempt, by=by, by_vc="a", by_priority="prod", why="borrowed capacity of vc a",
                       at_ms=T0)


def usage(snapshot: ClusterSnapshot) -> dict[str, tuple[int, int, list[int], list[int]]]:
    return {n.id: (n.usage.cpus, n.usage.memory_mb, sorted(n.usage.gpus), sorted(n.usage.ports))
            for n in snapshot.states}


def decide(node_count: int, holding: Sequence[JobRecord], queue: Sequence[JobRecord], vcs: dict[str, VirtualCluster],
           *, tries: int = 4, order: random.Random | None = None) -> Round:
    """The round as the scheduler runs it; the snapshot and the quota use are checked to come back unchanged."""
    snapshot = ClusterSnapshot.build(nodes(node_count), holding)
    used = dict(quota_usage(holding))
    candidates = candidates_of(holding, vcs, capacity_of(snapshot))
    if order is not None:
        order.shuffle(candidates)
    before, used_before = usage(snapshot), dict(used)
    result = preemption_round(snapshot, queue, candidates, vcs, used, tries=tries)
    assert usage(snapshot) == before, "the snapshot is given back as it was"
    assert used == used_before, "the quota use is the caller's, untouched"
    return result


def victims(result: Round) -> dict[str, list[str]]:
    """Per waiting job, its victims (cheapest first)."""
    return {p.job_id: [v.job_id for v in p.victims] for p in result.preemptions}


# --- what a waiting job may take ------------------------------------------------------------------------


def test_the_owner_reclaims_what_its_vc_lent() -> None:
    # b runs two prod jobs: the younger runs on a's idle quota. a's test job, within a's quota, takes it back.
    holding = [running("b-own", "b", ("n0", WHOLE), priority="prod", started_s=1),
               running("b-borrow", "b", ("n1", WHOLE), priority="prod", started_s=2)]
    result = decide(2, holding, [waiting("reclaim", "a", priority="test")], TWO_VCS)
    assert victims(result) == {"carol~reclaim": ["bob~b-borrow"]}
    assert result.reasons == {"carol~reclaim": "preempting 1 job: bob~b-borrow (borrowed capacity of vc a); frees "
                                               "8 GPUs for 8 needed, 0 beyond need"}
    assert result.tried == 1
    [answer] = result.preemptions
    assert [(t.node_id, t.gpus) for t in answer.plan.tasks] == [("n1", WHOLE)]


def test_an_oppo_job_goes_before_a_test_job_of_the_waiters_own_vc() -> None:
    holding = [running("a-test", "a", ("n0", WHOLE), started_s=9), running("oppo", "b", ("n1", WHOLE), priority="oppo"),
               running("b1", "b", ("n2", WHOLE)), running("b2", "b", ("n3", WHOLE))]
    result = decide(4, holding, [waiting("boss", "a")], TWO_VCS)
    assert victims(result) == {"carol~boss": ["bob~oppo"]}
    assert result.reasons["carol~boss"].startswith("preempting 1 job: bob~oppo (priority oppo < prod (opportunistic))")


def test_lower_priority_jobs_holding_the_quota_are_stopped_youngest_first() -> None:
    # a's quota (16 GPUs) is all held by its four 4-GPU test jobs; b's quota by its own jobs.
    holding = [running("t1", "a", ("n0", LOW), started_s=1), running("t2", "a", ("n0", HIGH), started_s=2),
               running("t3", "a", ("n1", LOW), started_s=3), running("t4", "a", ("n1", HIGH), started_s=4),
               running("b1", "b", ("n2", WHOLE)), running("b2", "b", ("n3", WHOLE))]
    result = decide(4, holding, [waiting("boss", "a")], TWO_VCS)
    assert victims(result) == {"carol~boss": ["bob~t4", "bob~t3"]}
    [answer] = result.preemptions
    assert [v.why for v in answer.victims] == ["priority test < prod in vc a: frees its quota"] * 2
    assert [(t.node_id, t.gpus) for t in answer.plan.tasks] == [("n1", WHOLE)], "it fits where they ran"
    assert (answer.freed.gpus, answer.needed.gpus, answer.unused_gpus) == (8, 8, 0)
    why = "priority test < prod in vc a: frees its quota"
    assert answer.reason == (f"preempting 2 jobs: bob~t4 ({why}), bob~t3 ({why}); frees 8 GPUs for 8 needed, "
                             "0 beyond need")


def test_a_quota_victim_that_neither_quota_nor_room_needs_is_spared() -> None:
    # The two youngest (t4 on n1, t3 on n0) free the quota but no whole node: n1 also needs t2, which
    # frees quota too, so t3 (on no node of the plan) is not stopped for nothing.
    holding = [running("t1", "a", ("n0", LOW), started_s=1), running("t2", "a", ("n1", LOW), started_s=2),
               running("t3", "a", ("n0", HIGH), started_s=3), running("t4", "a", ("n1", HIGH), started_s=4),
               running("b1", "b", ("n2", WHOLE)), running("b2", "b", ("n3", WHOLE))]
    result = decide(4, holding, [waiting("boss", "a")], TWO_VCS)
    assert victims(result) == {"carol~boss": ["bob~t4", "bob~t2"]}
    [answer] = result.preemptions
    assert [v.why for v in answer.victims] == ["priority test < prod in vc a: frees its quota",
                                               "priority test < prod in vc a"]
    assert [(t.node_id, t.gpus) for t in answer.plan.tasks] == [("n1", WHOLE)]
    assert (answer.freed.gpus, answer.unused_gpus) == (8, 0)


def test_quota_victims_only_when_they_free_enough_quota() -> None:
    # a's quota is held by a prod job and one test job: stopping the test job frees 4 of the 8 GPUs needed.
    holding = [running("p", "a", ("n0", LOW), priority="prod"), running("t", "a", ("n0", HIGH)),
               running("b1", "b", ("n1", LOW)), running("b2", "b", ("n1", HIGH))]
    result = decide(2, holding, [waiting("boss", "a")], TWO_VCS)
    assert result == Round(), "no victims; not counted as a try: its quota forbids it"


def test_no_victims_within_another_vcs_quota_whatever_the_priority() -> None:
    # b's test jobs hold half of each node, within b's quota: a's prod job (within a's quota) finds no
    # 8 free GPUs on one node, and may not stop them.
    holding = [running("b1", "b", ("n0", LOW)), running("b2", "b", ("n1", LOW))]
    result = decide(2, holding, [waiting("boss", "a")], TWO_VCS)
    assert (result.preemptions, result.reasons, result.tried, result.looked) == ([], {}, 0, 1), \
        "nobody it may stop: looked at, not one of the pass's tries"


def test_an_oppo_job_takes_nothing() -> None:
    holding = [running("o", "a", ("n0", WHOLE), priority="oppo")]
    assert decide(1, holding, [waiting("me-too", "a", priority="oppo")], TWO_VCS) == Round()


# --- preemptions in flight, bounds, several waiters -------------------------------------------------------


def test_a_preemption_in_flight_is_waited_for_and_costs_no_try() -> None:
    holding = [running("b-own", "b", ("n0", WHOLE), priority="prod", started_s=1),
               running("b-borrow", "b", ("n1", WHOLE), priority="prod", started_s=2, preempted=mark("carol~reclaim")),
               running("oppo", "b", ("n2", WHOLE), priority="oppo")]
    queue = [waiting("reclaim", "a", priority="test"), waiting("next", "a", priority="test")]
    result = decide(3, holding, queue, TWO_VCS, tries=1)
    assert result.reasons["carol~reclaim"] == "preemption of 1 job of vc b in progress"
    assert victims(result) == {"carol~next": ["bob~oppo"]}, "the in-flight one was not taken again"
    assert result.tried == 1


@pytest.mark.parametrize("tries", [0, 1, 2, 3, 5])
def test_tries_bound_the_waiting_jobs_looked_at_per_round(tries: int) -> None:
    holding = [running(f"o{i}", "default", (f"n{i}", WHOLE), priority="oppo") for i in range(3)]
    queue = [waiting(f"w{i}", "default") for i in range(3)]
    result = decide(3, holding, queue, ONE_VC, tries=tries)
    assert result.tried == min(tries, 3)
    assert list(victims(result)) == [f"carol~w{i}" for i in range(min(tries, 3))], "in the queue's order"


def test_two_waiters_never_get_the_same_victims_or_room() -> None:
    # n0: an oppo job (the cheapest victim), n1: a test job. The first waiter takes n0; the second sees
    # n0 promised (the oppo job gone, the first job placed there) and takes n1.
    holding = [running("o", "default", ("n0", WHOLE), priority="oppo"), running("t", "default", ("n1", WHOLE))]
    result = decide(2, holding, [waiting("first", "default"), waiting("second", "default")], ONE_VC)
    assert victims(result) == {"carol~first": ["bob~o"], "carol~second": ["bob~t"]}
    assert [[t.node_id for t in p.plan.tasks] for p in result.preemptions] == [["n0"], ["n1"]]


def test_a_waiter_with_no_room_left_after_the_first_takes_nothing() -> None:
    holding = [running("o", "default", ("n0", WHOLE), priority="oppo"), running("c", "default", ("n1", WHOLE),
                                                                               priority="crit")]
    result = decide(2, holding, [waiting("first", "default"), waiting("second", "default")], ONE_VC)
    assert victims(result) == {"carol~first": ["bob~o"]}
    assert (result.tried, result.looked) == (1, 2) and "carol~second" not in result.reasons


def test_same_inputs_same_round_whatever_the_candidates_order() -> None:
    # Equal test jobs on every node: only the seeds decide which are stopped.
    holding = [running(f"t{i}", "default", (f"n{i}", LOW), started_s=1) for i in range(6)]
    holding += [running(f"u{i}", "default", (f"n{i}", HIGH), started_s=1) for i in range(6)]
    queue = [waiting(f"w{i}", "default", gpus=8) for i in range(3)]
    first = decide(6, holding, queue, ONE_VC)
    assert len(first.preemptions) == 3 and all(isinstance(p, Preemption) for p in first.preemptions)
    shuffle = random.Random(11)
    for _ in range(5):
        assert decide(6, holding, queue, ONE_VC, order=shuffle) == first
    taken = [v for vs in victims(first).values() for v in vs]
    assert len(taken) == len(set(taken)) == 6


# --- no loops ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("preempted_by", "expected"), [
    ((), {"carol~back": ["bob~w"]}),
    (("bob~w",), {}),
])
def test_a_job_never_preempts_its_preemptor_back(preempted_by: tuple[str, ...],
                                                 expected: dict[str, list[str]]) -> None:
    # w runs beyond a's quota on b's idle capacity; b's job within b's quota would reclaim it, unless w
    # preempted that job before (it was requeued with w in its lineage).
    holding = [running("a-own", "a", ("n0", WHOLE), started_s=1), running("w", "a", ("n1", WHOLE), started_s=2)]
    result = decide(2, holding, [waiting("back", "b", priority="test", preempted_by=preempted_by)], TWO_VCS)
    assert victims(result) == expected
    assert (result.tried, result.looked) == ((1, 1) if expected else (0, 1))


@pytest.mark.parametrize(("victim_lineage", "waiting_lineage", "expected"), [
    ((), (), ("carol~boss",)),
    (("x",), ("y",), ("x", "carol~boss", "y")),
    (("x", "y"), ("y", "z"), ("x", "y", "carol~boss", "z")),
    (tuple(f"j{i}" for i in range(20)), (), (*(f"j{i}" for i in range(5, 20)), "carol~boss")),
])
def test_the_victims_lineage(victim_lineage: tuple[str, ...], waiting_lineage: tuple[str, ...],
                             expected: tuple[str, ...]) -> None:
    victim = running("v", "b", ("n0", WHOLE)).model_copy(update={"preempted_by": victim_lineage})
    after = lineage_after(victim, waiting("boss", "a", preempted_by=waiting_lineage))
    assert after == expected and len(after) <= LINEAGE_MAX


# --- candidates from job records ----------------------------------------------------------------------------


def test_candidates_of_job_records() -> None:
    holding = [
        running("plain", "default", ("n0", (0,))),
        running("marked", "default", ("n0", (1,)), preempted=mark("carol~boss")),
        running("stale", "default", ("n0", (2,)), attempt=1, preempted=mark("carol~old", attempt=0)),
        running("retrying", "default", ("n0", (3,)), state=JobState.WAITING, sub_state=SubState.RETRY_PENDING),
        running("retrying-marked", "default", ("n0", (4,)), state=JobState.WAITING, sub_state=SubState.RETRY_PENDING,
                preempted=mark("carol~boss")),
        running("stopping", "default", ("n0", (5,)), stop_requested_by="alice"),
        running("ended", "default", ("n0", (6,)), state=JobState.FAILED),
    ]
    candidates = candidates_of(holding, ONE_VC, capacity_of(ClusterSnapshot.build(nodes(1), holding)))
    assert {c.job_id: c.stopping_for for c in candidates} == {
        "bob~plain": None, "bob~marked": "carol~boss", "bob~stale": None, "bob~retrying-marked": "carol~boss"}
    assert all(c.borrowed_from == () for c in candidates)


def test_candidates_say_whom_they_borrow_from() -> None:
    holding = [running("b-own", "b", ("n0", WHOLE), started_s=1), running("b-borrow", "b", ("n1", WHOLE), started_s=2)]
    candidates = candidates_of(holding, TWO_VCS, capacity_of(ClusterSnapshot.build(nodes(2), holding)))
    assert {c.job_id: c.borrowed_from for c in candidates} == {"bob~b-own": (), "bob~b-borrow": ("a",)}


def test_waiters_with_nobody_to_stop_do_not_keep_a_reclaiming_job_from_its_turn() -> None:
    # Six jobs of b wait ahead; the borrower once preempted each of them, so they may not stop it (no
    # loops) and nobody else: each is looked at, none uses the round's one try. The job behind them
    # reclaims b's GPUs from the borrower of a in the same round.
    holding = [running("borrower", "a", ("n1", WHOLE), priority="prod", started_s=1),
               running("own", "a", ("n0", WHOLE), priority="prod", started_s=0)]
    queue = [waiting(f"hopeless{i}", "b", priority="test", preempted_by=("bob~borrower",)) for i in range(6)]
    queue.append(waiting("reclaim", "b", priority="test"))
    result = decide(2, holding, queue, TWO_VCS, tries=1)
    assert victims(result) == {"carol~reclaim": ["bob~borrower"]}
    assert (result.tried, result.looked) == (1, 7)
    assert decide(2, holding, queue, TWO_VCS, tries=0) == Round(), "no tries, nothing looked at"
    bounded = decide(2, holding, [*queue[:6], *queue[:3], queue[6]], TWO_VCS, tries=1)
    assert (bounded.tried, bounded.looked, bounded.preemptions) == (0, 8, []), "at most 8 looked at per try"
