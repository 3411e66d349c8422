"""The waiting queue: per-VC order, quotas, positions and reasons, bounded backfill."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

import pytest

from shared.errors import SettingsError
from shared.records import JobRecord, JobState, SubState, TaskState
from shared.scheduling.borrowing import quota_usage
from shared.scheduling.placement import ClusterSnapshot
from shared.scheduling.queueing import (
    QueueDecision,
    QueueEntry,
    Share,
    Shares,
    Waiting,
    entry_of,
    never_fits_key,
    plan_queue,
    queue_positions,
    request_of,
    shown_reason,
    usage_by_vc,
    user_shares,
)
from shared.scheduling.vclusters import (
    Quota,
    Resources,
    VirtualCluster,
    load_config,
    quota_problem,
    with_default,
)
from tests.unit.factories import make_config, make_job, make_node, role_dict

pytestmark = pytest.mark.unit

NOW = 1_800_000_000_000
BOUND = 600_000


def queued(name: str, *, cpus: int = 1, tasks: int = 1, gpus: int = 0, vc: str = "default",
           age_s: int = 10, priority: str | None = None, user: str = "alice") -> JobRecord:
    extras = {"hivedScheduler": {"jobPriorityClass": priority}} if priority else {}
    config = make_config(role_dict("main", taskNumber=tasks, cpuNumber=cpus, gpuNumber=gpus),
                         jobName=name, virtualCluster=vc, extras=extras)
    job = make_job(config, state=JobState.WAITING)
    return job.model_copy(update={"id": f"{user}~{name}~0", "user": user, "sub_state": SubState.QUEUED,
                                  "created_ms": NOW - age_s * 1000})


def decide(jobs: list[JobRecord], *, nodes: int = 1, cpus: int = 4, gpus: int = 0,
           vcs: list[VirtualCluster] | None = None, bound: int = BOUND,
           shares: Shares | None = None) -> tuple[list[str], dict[str, tuple[int, str]]]:
    snapshot = ClusterSnapshot.build([make_node(f"n{i}", cpus=cpus, gpus=["V100"] * gpus) for i in range(nodes)], [])
    decision = plan_queue(snapshot, jobs, with_default(vcs or []), {}, NOW, bound, shares=shares)
    return ([j.name for j, _ in decision.start],
            {job_id.split("~")[1]: (w.position, w.reason) for job_id, w in decision.waiting.items()})


def test_jobs_start_oldest_first_while_they_fit() -> None:
    started, waiting = decide([queued("young", cpus=2, age_s=1), queued("old", cpus=2, age_s=9),
                               queued("third", cpus=2, age_s=0)])
    assert started == ["old", "young"]
    assert waiting == {"third": (1, waiting["third"][1])}
    assert waiting["third"][1].startswith("task main[0] fits on no node"), "the reason says why, not where"


def test_a_small_job_backfills_past_a_blocked_head_within_the_bound() -> None:
    started, waiting = decide([queued("big", cpus=8, age_s=60), queued("small", cpus=1, age_s=5)])
    assert started == ["small"]
    assert waiting["big"][0] == 1 and "lacks 8 free CPUs" in waiting["big"][1]


def test_no_backfill_once_the_head_waited_past_the_bound() -> None:
    started, waiting = decide([queued("hog", cpus=4, age_s=1000), queued("big", cpus=4, tasks=2, age_s=700),
                               queued("small", cpus=1, age_s=5)], nodes=2, cpus=4)
    assert started == ["hog"], "big fits an idle cluster but not now; small may not pass it any more"
    assert waiting["small"][0] == 2
    assert "behind big" in waiting["small"][1] and "nothing else in the VC starts before it" in waiting["small"][1]


def test_a_job_that_can_never_fit_does_not_block_its_queue() -> None:
    started, waiting = decide([queued("impossible", cpus=64, age_s=900), queued("small", cpus=1, age_s=5)])
    assert started == ["small"], "past the bound, yet the impossible job holds no one up"
    assert "it cannot start even on an idle cluster: task main[0] fits on no node" in waiting["impossible"][1]


def test_positions_count_only_the_jobs_still_waiting() -> None:
    _, waiting = decide([queued("a", cpus=5, age_s=30), queued("fits", cpus=1, age_s=20),
                         queued("b", cpus=5, age_s=10), queued("c", cpus=6, age_s=5)])
    assert {name: pos for name, (pos, _) in waiting.items()} == {"a": 1, "b": 2, "c": 3}


def test_gang_jobs_that_do_not_fit_whole_hold_nothing() -> None:
    started, waiting = decide([queued("gang", cpus=2, tasks=4, age_s=20), queued("after", cpus=2, tasks=3, age_s=10)],
                              nodes=3, cpus=2)
    assert started == ["after"], "the 4-task job holds nothing, so the 3-task job gets the three nodes"
    assert "task main[3] fits on no node" in waiting["gang"][1]


def test_a_vc_quota_caps_what_its_jobs_hold() -> None:
    team = VirtualCluster(name="team", quota=Quota(cpus=50, memory=50, gpus=50), users=("alice",))
    started, waiting = decide([queued("one", cpus=2, vc="team", age_s=9), queued("two", cpus=2, vc="team", age_s=8),
                               queued("three", cpus=1, vc="team", age_s=7)], nodes=2, cpus=4, vcs=[team])
    assert started == ["one", "two"]
    assert "virtual cluster team would exceed its quota: the job needs 1 CPUs, 0 of 4 are free" in waiting["three"][1]


def test_a_job_larger_than_its_whole_quota_says_so() -> None:
    team = VirtualCluster(name="team", quota=Quota(cpus=25, memory=100, gpus=100))
    _, waiting = decide([queued("huge", cpus=4, tasks=2, vc="team")], nodes=2, cpus=8, vcs=[team])
    assert "team's quota is 4 in all (25% of the cluster): it cannot start until the quota grows" in waiting["huge"][1]


def test_queues_of_different_vcs_do_not_block_each_other() -> None:
    team = VirtualCluster(name="team", quota=Quota(cpus=50, memory=50, gpus=50))
    started, waiting = decide([queued("stuck", cpus=4, vc="team", age_s=900), queued("free", cpus=1, age_s=1)],
                              nodes=1, cpus=4, vcs=[team])
    assert started == ["free"] and "stuck" in waiting


def test_a_job_of_a_deleted_vc_waits_and_says_why() -> None:
    _, waiting = decide([queued("orphan", vc="gone")])
    assert waiting["orphan"] == (1, "virtual cluster gone no longer exists")


def test_usage_counts_only_tasks_that_hold_resources() -> None:
    job = make_job(make_config(role_dict("main", taskNumber=2, cpuNumber=3, gpuNumber=1)), state=JobState.RUNNING)
    tasks = (job.tasks[0].model_copy(update={"node_id": "n1", "gpus": (0,)}), job.tasks[1])
    used = usage_by_vc([job.model_copy(update={"tasks": tasks})])
    assert used["default"] == Resources(cpus=3, memory_mb=100, gpus=1)
    assert request_of(job) == Resources(cpus=6, memory_mb=200, gpus=2)


def test_default_gets_what_the_other_vcs_leave() -> None:
    vcs = with_default([VirtualCluster(name="a", quota=Quota(cpus=30, memory=20, gpus=50)),
                        VirtualCluster(name="b", quota=Quota(cpus=20, memory=0, gpus=50))])
    assert vcs["default"].quota == Quota(cpus=50, memory=80, gpus=0)
    assert vcs["default"].admits("anyone")


@pytest.mark.parametrize(("vc", "user", "groups", "admitted"), [
    (VirtualCluster(name="x", users=("alice",)), "alice", (), True),
    (VirtualCluster(name="x", users=("alice",)), "bob", (), False),
    (VirtualCluster(name="x", users=(), groups=("ml",)), "bob", ("ml",), True),
    (VirtualCluster(name="x", users=(), groups=("ml",)), "bob", ("ops",), False),
    (VirtualCluster(name="x"), "anyone", (), True),
])
def test_who_a_vc_admits(vc: VirtualCluster, user: str, groups: tuple[str, ...], admitted: bool) -> None:
    assert vc.admits(user, groups) is admitted


def test_quota_check_passes_when_it_fits() -> None:
    vc = VirtualCluster(name="t", quota=Quota(cpus=50, memory=50, gpus=50))
    cap = Resources(cpus=8, memory_mb=1000, gpus=4)
    assert quota_problem(vc, cap, Resources(gpus=1), Resources(gpus=1)) is None
    assert "GPUs" in (quota_problem(vc, cap, Resources(gpus=2), Resources(gpus=1)) or "")


@pytest.mark.parametrize(("text", "problem"), [
    ("- {name: a, quota: {cpus: 60}}\n- {name: b, quota: {cpus: 50}}", "add up to 110%"),
    ("- {name: a}\n- {name: a}", "listed twice"),
    ("- {name: 'bad name'}", "not a valid virtual cluster list"),
    ("name: a", "must be a YAML list"),
])
def test_the_operator_file_is_checked(tmp_path: Path, text: str, problem: str) -> None:
    path = tmp_path / "vcs.yaml"
    path.write_text(text)
    with pytest.raises(SettingsError) as refused:
        load_config(path)
    assert refused.value.name == "PAIQ_VIRTUAL_CLUSTERS" and problem in str(refused.value)


def test_a_good_operator_file_loads(tmp_path: Path) -> None:
    path = tmp_path / "vcs.yaml"
    path.write_text("- name: vision\n  quota: {cpus: 40, memory: 40, gpus: 60}\n  users: [alice]\n  groups: [cv]\n")
    [vc] = load_config(path)
    assert vc.name == "vision" and vc.quota.gpus == 60 and vc.admits("carol", ("cv",))


def test_positions_are_derived_per_vc_in_queue_order_and_shown_in_the_reason() -> None:
    positions = queue_positions([QueueEntry("c", "default", 30), QueueEntry("a", "default", 10),
                                 QueueEntry("x", "team", 5), QueueEntry("b", "default", 10)])
    assert positions == {"a": 1, "b": 2, "c": 3, "x": 1}
    assert shown_reason("task main[0] fits on no node", 2, "team") == (
        "position 2 in virtual cluster team's queue: task main[0] fits on no node")
    assert shown_reason("", 1, "default") == "position 1 in virtual cluster default's queue"
    assert shown_reason("running", None, "default") == "running"


def test_a_job_that_never_fits_is_tried_on_the_idle_cluster_once_per_cluster_shape() -> None:
    snapshot = ClusterSnapshot.build([make_node("n0", cpus=4)], [])
    jobs = [queued("impossible", cpus=8), queued("fits-later", cpus=4, age_s=20), queued("blocker", cpus=4, age_s=30)]
    first = plan_queue(snapshot, jobs, with_default([]), {}, NOW, BOUND)
    assert [j.name for j, _ in first.start] == ["blocker"]
    assert first.never_fits == {never_fits_key(jobs[0]): True, never_fits_key(jobs[1]): False}
    # Told (wrongly, to show it is believed) that "impossible" could fit some day: it is not tried again.
    second = plan_queue(ClusterSnapshot.build([make_node("n0", cpus=4)], []), jobs[:1], with_default([]), {}, NOW,
                        BOUND, {never_fits_key(jobs[0]): False})
    assert second.never_fits == {never_fits_key(jobs[0]): False}
    assert not second.waiting["alice~impossible~0"].reason.startswith("it cannot start even on an idle cluster")


def test_a_job_known_never_to_fit_on_this_cluster_is_not_placed_again() -> None:
    job = queued("impossible", cpus=2).model_copy(update={
        "reason": "it cannot start even on an idle cluster: task main[0] fits on no node: 1 node lacks 8 free CPUs"})
    snapshot = ClusterSnapshot.build([make_node("n0", cpus=4)], [])
    # Believed (for this cluster shape) never to fit: it is not tried, though it would fit; its reason stays.
    decision = plan_queue(snapshot, [job], with_default([]), {}, NOW, BOUND, {never_fits_key(job): True})
    assert decision.start == [] and decision.waiting[job.id].reason == job.reason
    assert decision.never_fits == {never_fits_key(job): True}


# --- priority and fair share ----------------------------------------------------------------------


def test_higher_priority_starts_first_whatever_its_age() -> None:
    started, waiting = decide([queued("old-test", cpus=4, age_s=90),
                               queued("new-prod", cpus=4, age_s=1, priority="prod"),
                               queued("oppo", cpus=4, age_s=300, priority="oppo")])
    assert started == ["new-prod"]
    assert waiting["old-test"][0] == 1 and waiting["oppo"][0] == 2, "oppo waits behind every guaranteed job"


def test_equal_priorities_go_to_the_user_with_the_smaller_share_then_the_older() -> None:
    jobs = [queued("bob-old", user="bob", cpus=4, age_s=90), queued("carol-new", user="carol", cpus=4, age_s=1),
            queued("carol-newer", user="carol", cpus=4, age_s=0)]
    shares = {"default": {"bob": Share(0.5, 0.5), "carol": Share(0.1, 0.0)}}
    started, waiting = decide(jobs, shares=shares)
    assert started == ["carol-new"], "carol holds less of the VC: her job first, though bob's is older"
    assert waiting == {"bob-old": (2, waiting["bob-old"][1]), "carol-newer": (1, waiting["carol-newer"][1])}
    # without shares (nobody runs anything): age decides
    assert decide(jobs)[0] == ["bob-old"]
    # priority before share: bob's prod job goes first although bob holds more
    assert decide([*jobs, queued("bob-prod", user="bob", cpus=4, priority="prod")], shares=shares)[0] == ["bob-prod"]


def test_a_tie_in_the_dominant_share_is_broken_by_the_gpu_share() -> None:
    shares = {"default": {"bob": Share(0.5, 0.5), "carol": Share(0.5, 0.1)}}
    jobs = [queued("bob", user="bob", cpus=4, age_s=90), queued("carol", user="carol", cpus=4, age_s=1)]
    assert decide(jobs, shares=shares)[0] == ["carol"]


def test_positions_follow_the_same_order_as_the_decision() -> None:
    jobs = [queued("bob-old", user="bob", cpus=8, age_s=90), queued("carol-new", user="carol", cpus=8, age_s=1),
            queued("dave-prod", user="dave", cpus=8, age_s=0, priority="prod")]
    shares = {"default": {"bob": Share(0.5, 0.5)}}
    _, waiting = decide(jobs, shares=shares)
    positions = queue_positions([entry_of(j) for j in jobs], shares)
    assert positions == {j.id: waiting[j.name][0] for j in jobs} == {
        "dave~dave-prod~0": 1, "carol~carol-new~0": 2, "bob~bob-old~0": 3}


def test_users_shares_are_their_dominant_fraction_of_the_vc_quota() -> None:
    vcs = with_default([VirtualCluster(name="team", quota=Quota(cpus=50, memory=50, gpus=50))])
    capacity = Resources(cpus=16, memory_mb=65536, gpus=8)  # team: 8 CPUs, 32768 MB, 4 GPUs
    gpu_job = make_job(make_config(role_dict("main", taskNumber=2, cpuNumber=1, memoryMB=1024, gpuNumber=1),
                                   virtualCluster="team"), state=JobState.RUNNING)
    gpu_job = gpu_job.model_copy(update={"user": "bob", "tasks": tuple(
        t.model_copy(update={"node_id": "n0", "gpus": (i,), "state": TaskState.RUNNING})
        for i, t in enumerate(gpu_job.tasks))})
    cpu_job = make_job(make_config(role_dict("main", taskNumber=1, cpuNumber=4, memoryMB=1024), virtualCluster="team"),
                       state=JobState.RUNNING)
    cpu_job = cpu_job.model_copy(update={"user": "carol", "tasks": tuple(
        t.model_copy(update={"node_id": "n0", "state": TaskState.RUNNING}) for t in cpu_job.tasks)})
    shares = user_shares([gpu_job, cpu_job], vcs, capacity)
    assert shares == {"team": {"bob": Share(dominant=0.5, gpus=0.5), "carol": Share(dominant=0.5, gpus=0.0)}}



# --- borrowing and opportunistic jobs ------------------------------------------------------------------
# One node of 8 GPUs and 16 CPUs; VCs a and b have half each (4 GPUs, 8 CPUs), b may borrow half more.

HALF = Quota(cpus=50, memory=50, gpus=50)
LENDER, BORROWER = VirtualCluster(name="a", quota=HALF), VirtualCluster(name="b", quota=HALF, borrowing=HALF)


def gpu_job(name: str, vc: str, gpus: int, *, age_s: int = 10, priority: str | None = None) -> JobRecord:
    return queued(name, gpus=gpus, vc=vc, age_s=age_s, priority=priority)


def holding(name: str, vc: str, gpus: tuple[int, ...], *, priority: str | None = None) -> JobRecord:
    """A job running on n0 holding ``gpus`` (and 1 CPU, 100 MB)."""
    job = gpu_job(name, vc, len(gpus), priority=priority)
    return job.model_copy(update={"state": JobState.RUNNING, "sub_state": SubState.RUNNING, "tasks": tuple(
        t.model_copy(update={"node_id": "n0", "gpus": gpus, "state": TaskState.RUNNING}) for t in job.tasks)})


class Pass(NamedTuple):
    started: list[str]
    waiting: dict[str, Waiting]  # by job name
    used: dict[str, Resources]  # after the pass
    decision: QueueDecision


def one_pass(jobs: list[JobRecord], running: Sequence[JobRecord] = (),
             vcs: Sequence[VirtualCluster] = (LENDER, BORROWER)) -> Pass:
    snapshot = ClusterSnapshot.build([make_node("n0", cpus=16, memory_mb=65536, gpus=["V100"] * 8)], running)
    used = dict(quota_usage(running))
    decision = plan_queue(snapshot, jobs, with_default(list(vcs)), used, NOW, BOUND)
    return Pass([j.name for j, _ in decision.start], {k.split("~")[1]: w for k, w in decision.waiting.items()},
                used, decision)


def test_a_borrower_runs_on_the_idle_quota_of_another_vc() -> None:
    result = one_pass([gpu_job("big", "b", 6)])
    assert result.started == ["big"] and result.waiting == {}
    assert result.used["b"] == Resources(cpus=1, memory_mb=100, gpus=6)


def test_a_vc_without_a_borrowing_limit_stays_within_its_quota() -> None:
    no_borrowing = BORROWER.model_copy(update={"borrowing": Quota()})
    result = one_pass([gpu_job("first", "b", 4, age_s=9), gpu_job("more", "b", 1, age_s=5),
                       gpu_job("big", "b", 6, age_s=1)], vcs=[LENDER, no_borrowing])
    assert result.started == ["first"]
    assert result.waiting == {
        "more": Waiting(1, "virtual cluster b would exceed its quota: the job needs 1 GPUs, 0 of 4 are free in the "
                           "quota"),
        "big": Waiting(2, "it cannot start even on an idle cluster: it needs 6 GPUs but virtual cluster b's quota is 4 "
                          "in all (50% of the cluster): it cannot start until the quota grows", may_preempt=False)}


@pytest.mark.parametrize(("lender", "borrower"), [("a", "b"), ("b", "a")])
def test_owners_start_before_borrowers_in_the_same_pass(lender: str, borrower: str) -> None:
    # The borrower's job is older and of higher priority: the owner's job within its quota still goes first.
    vcs = [VirtualCluster(name=lender, quota=HALF), VirtualCluster(name=borrower, quota=HALF, borrowing=HALF)]
    result = one_pass([gpu_job("borrows", borrower, 6, age_s=500, priority="prod"),
                       gpu_job("owns", lender, 4, age_s=1)], vcs=vcs)
    assert result.started == ["owns"]
    assert result.waiting == {"borrows": Waiting(1, (
        f"virtual cluster {borrower} would borrow 2 GPUs beyond its quota but the other virtual clusters leave 0 "
        "idle"), may_preempt=True)}


def test_borrowers_and_oppo_jobs_share_what_is_left_in_queue_order() -> None:
    # a queues only an opportunistic job: b's borrower (test, younger) comes first in the one order.
    result = one_pass([gpu_job("oppo", "a", 4, age_s=500, priority="oppo"), gpu_job("borrows", "b", 6, age_s=1)])
    assert result.started == ["borrows"]
    assert result.waiting["oppo"].reason.startswith("opportunistic: it runs only on idle capacity: task main[0] "
                                                    "fits on no node")
    assert result.used == {"b": Resources(cpus=1, memory_mb=100, gpus=6)}, "the oppo job counts in no quota"


def test_an_oppo_job_runs_on_idle_capacity_whatever_its_quota() -> None:
    full = holding("full", "a", (0, 1, 2, 3))
    result = one_pass([gpu_job("oppo", "a", 2, priority="oppo")], running=[full])
    assert result.started == ["oppo"]
    assert result.used == {"a": Resources(cpus=1, memory_mb=100, gpus=4)}, "a's quota use is unchanged"


def test_an_oppo_job_without_idle_room_says_why() -> None:
    running = [holding("a-full", "a", (0, 1, 2, 3)), holding("b-full", "b", (4, 5, 6, 7))]
    result = one_pass([gpu_job("oppo", "b", 1, priority="oppo")], running=running)
    waits = result.waiting["oppo"]
    assert result.started == [] and waits.position == 1 and waits.may_preempt
    assert waits.reason.startswith("opportunistic: it runs only on idle capacity: task main[0] fits on no node")


def test_waits_that_may_not_preempt() -> None:
    # default has the whole cluster; "gang" (8 GPUs) is blocked past the bound by a running job.
    running = [holding("busy", "default", (0, 1, 2, 3))]
    result = one_pass([gpu_job("gang", "default", 8, age_s=1000), gpu_job("small", "default", 1, age_s=5),
                       gpu_job("huge", "default", 9, age_s=2000)], running=running, vcs=[])
    assert result.started == []
    assert result.waiting["gang"].may_preempt, "the head may make room"
    assert not result.waiting["small"].may_preempt and result.waiting["small"].reason.startswith("behind gang")
    assert not result.waiting["huge"].may_preempt
    assert result.waiting["huge"].reason.startswith("it cannot start even on an idle cluster: task main[0]")


def test_a_job_beyond_its_quota_and_borrowing_limit_never_fits() -> None:
    limited = BORROWER.model_copy(update={"borrowing": Quota(cpus=50, memory=50, gpus=25)})  # 4 + 2 GPUs at most
    result = one_pass([gpu_job("huge", "b", 7, age_s=900), gpu_job("fits", "b", 6, age_s=5)], vcs=[LENDER, limited])
    assert result.started == ["fits"], "it holds no one up"
    assert result.waiting == {"huge": Waiting(1, (
        "it cannot start even on an idle cluster: borrowing limit: virtual cluster b would run 3 GPUs beyond its "
        "quota, 25% of the cluster (2) is its borrowing limit"), may_preempt=False)}
    assert result.decision.never_fits == {"alice~huge~0#0": True}


def test_a_waiting_job_says_how_many_higher_priority_jobs_wait_ahead_of_it() -> None:
    # a's quota is 4 GPUs, all held: every job of a waits; each says how many of higher priority are ahead.
    result = one_pass([gpu_job("low", "a", 1, age_s=50), gpu_job("mid", "a", 1, age_s=40, priority="prod"),
                       gpu_job("top", "a", 1, age_s=30, priority="crit"), gpu_job("peer", "a", 1, age_s=20,
                                                                                 priority="prod")],
                      running=[holding("held", "a", (0, 1, 2, 3), priority="crit")])
    ahead = {name: w.reason.split(";")[0] if w.reason.startswith("higher") else ""
             for name, w in result.waiting.items()}
    assert ahead == {"top": "", "mid": "higher priority jobs ahead: 1", "peer": "higher priority jobs ahead: 1",
                     "low": "higher priority jobs ahead: 3"}
    assert [w.position for w in sorted(result.waiting.values(), key=lambda w: w.position)] == [1, 2, 3, 4]
