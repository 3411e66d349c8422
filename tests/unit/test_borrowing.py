"""Borrowing between virtual clusters: admission (within, borrowing, refused and why), what others lend,
which running jobs are the borrowers and from whom, and the borrowed / lent spread shown per VC.

One cluster throughout: 16 CPUs, 64 GiB and 8 GPUs. VCs ``a`` and ``b`` have half each (8 CPUs, 32 GiB,
4 GPUs); ``b`` may borrow up to half the cluster more, ``a`` does not borrow."""

from __future__ import annotations

import pytest

from shared.records import JobRecord, JobState, TaskState
from shared.scheduling.borrowing import (
    Admission,
    admit,
    borrowed,
    borrowed_and_lent,
    borrowers,
    counts_in_quota,
    idle_quota,
    lendable,
    lenders,
    quota_usage,
)
from shared.scheduling.vclusters import Quota, Resources, VirtualCluster, with_default
from tests.unit.factories import make_config, make_job, make_task, role_dict

pytestmark = pytest.mark.unit

T0 = 1_700_000_000_000
CAPACITY = Resources(cpus=16, memory_mb=65536, gpus=8)
HALF = Quota(cpus=50, memory=50, gpus=50)
A = VirtualCluster(name="a", quota=HALF)
B = VirtualCluster(name="b", quota=HALF, borrowing=HALF)
VCS = with_default([A, B])  # default gets 0%


def gpus(n: float, cpus: float = 0, memory_mb: float = 0) -> Resources:
    return Resources(cpus=cpus, memory_mb=memory_mb, gpus=n)


# --- admit ---------------------------------------------------------------------------------------------


ADMISSIONS: list[tuple[str, VirtualCluster, Resources, Resources, Resources, Admission]] = [
    ("within the quota", B, gpus(2), gpus(2), gpus(4), Admission(kind="within")),
    ("up to the quota exactly", B, gpus(2), gpus(2), gpus(0), Admission(kind="within")),
    ("beyond the quota, on what a leaves idle", B, gpus(4), gpus(2), gpus(4),
     Admission(kind="borrows", borrows=gpus(2))),
    ("borrowing already: the whole excess counts", B, gpus(6), gpus(1), gpus(4),
     Admission(kind="borrows", borrows=gpus(3))),
    ("beyond the borrowing limit", B.model_copy(update={"borrowing": Quota(gpus=25)}), gpus(4), gpus(3), gpus(4),
     Admission(kind="refused", reason=(
         "borrowing limit: virtual cluster b would run 3 GPUs beyond its quota, 25% of the cluster (2) is its "
         "borrowing limit"))),
    ("CPUs beyond a limit that lends only GPUs", B.model_copy(update={"borrowing": Quota(gpus=50)}),
     gpus(4, cpus=8), gpus(1, cpus=1), gpus(4, cpus=8),
     Admission(kind="refused", reason=(
         "borrowing limit: virtual cluster b would run 1 CPUs beyond its quota, 0% of the cluster (0) is its "
         "borrowing limit"))),
    ("the others leave too little idle", B, gpus(4), gpus(2), gpus(1),
     Admission(kind="refused", reason=(
         "virtual cluster b would borrow 2 GPUs beyond its quota but the other virtual clusters leave 1 idle"))),
    ("a VC that does not borrow: its quota's own words", A, gpus(4), gpus(2), gpus(4),
     Admission(kind="refused", reason=(
         "virtual cluster a would exceed its quota: the job needs 2 GPUs, 0 of 4 are free in the quota"))),
    ("a VC that does not borrow, larger than its quota", A, gpus(0), gpus(6), gpus(4),
     Admission(kind="refused", reason=(
         "it needs 6 GPUs but virtual cluster a's quota is 4 in all (50% of the cluster): it cannot start until "
         "the quota grows"))),
    ("a 100% quota is never exceeded", VirtualCluster(name="all", quota=Quota(cpus=100, memory=100, gpus=100)),
     gpus(8), gpus(8), gpus(0), Admission(kind="within")),
]


@pytest.mark.parametrize(("vc", "used", "asked", "lendable_now", "expected"), [a[1:] for a in ADMISSIONS],
                         ids=[a[0] for a in ADMISSIONS])
def test_admit(vc: VirtualCluster, used: Resources, asked: Resources, lendable_now: Resources,
               expected: Admission) -> None:
    assert admit(vc, CAPACITY, used, asked, lendable_now) == expected


def test_a_refusal_by_the_borrowing_limit_is_worded_to_be_recognised() -> None:
    answer = admit(B, CAPACITY, gpus(4), gpus(5), gpus(8))
    assert answer.kind == "refused" and answer.reason.startswith("borrowing limit:")


# --- borrowed, idle, lendable, lenders ------------------------------------------------------------------


@pytest.mark.parametrize(("vc", "used", "expected"), [
    (B, gpus(3, cpus=2), Resources()),
    (B, gpus(6, cpus=10, memory_mb=1000), gpus(2, cpus=2)),
    (VirtualCluster(name="all", quota=Quota(cpus=100, memory=100, gpus=100)), gpus(12, cpus=20), Resources()),
    (VirtualCluster(name="gpus", quota=Quota(cpus=50, memory=50, gpus=100)), gpus(12, cpus=10), gpus(0, cpus=2)),
])
def test_borrowed_is_the_excess_over_the_quota(vc: VirtualCluster, used: Resources, expected: Resources) -> None:
    assert borrowed(vc, CAPACITY, used) == expected


def test_idle_quota_is_never_negative() -> None:
    assert idle_quota(A, CAPACITY, gpus(1, cpus=2)) == Resources(cpus=6, memory_mb=32768, gpus=3)
    assert idle_quota(B, CAPACITY, gpus(6, cpus=10)) == Resources(cpus=0, memory_mb=32768, gpus=0)


@pytest.mark.parametrize(("used", "borrower", "expected"), [
    ({}, "b", Resources(cpus=8, memory_mb=32768, gpus=4)),
    ({"a": gpus(1, cpus=2)}, "b", Resources(cpus=6, memory_mb=32768, gpus=3)),
    ({"a": gpus(4, cpus=8, memory_mb=32768)}, "b", Resources()),
    ({"b": gpus(6)}, "a", Resources(cpus=8, memory_mb=32768, gpus=0)),  # b's idle CPUs and memory only
])
def test_lendable_is_the_others_idle_quota(used: dict[str, Resources], borrower: str, expected: Resources) -> None:
    assert lendable(VCS, CAPACITY, used, borrower) == expected


def test_lendable_subtracts_what_other_vcs_already_borrow() -> None:
    # a 50%, b and c 25% each (4, 2 and 2 GPUs): c runs 3 GPUs, borrowing 1 of a's 4 idle ones.
    vcs = with_default([A, VirtualCluster(name="b", quota=Quota(gpus=25), borrowing=HALF),
                        VirtualCluster(name="c", quota=Quota(gpus=25), borrowing=HALF)])
    used = {"c": gpus(3)}
    assert lendable(vcs, CAPACITY, used, "b").gpus == 3
    assert lendable(vcs, CAPACITY, used, "c").gpus == 6, "its own borrowing is not subtracted from what it may borrow"
    assert lenders(vcs, CAPACITY, used) == ("a", "b", "default")  # default: the CPUs and memory a and b leave


def test_lenders_are_the_vcs_with_idle_quota() -> None:
    full = gpus(4, cpus=8, memory_mb=32768)
    assert lenders(VCS, CAPACITY, {"a": full, "b": gpus(5)}) == ("b",), "b's idle CPUs and memory"
    assert lenders(VCS, CAPACITY, {"a": full, "b": full}) == ()


# --- which running jobs borrow -----------------------------------------------------------------------


def running(name: str, vc: str, n_gpus: int, started_s: int, *, priority: str | None = None) -> JobRecord:
    """A running one-task job holding ``n_gpus`` GPUs (and 1 CPU, 100 MB), launched at ``started_s``."""
    extras = {"hivedScheduler": {"jobPriorityClass": priority}} if priority else {}
    config = make_config(role_dict("main", gpuNumber=n_gpus), jobName=name, virtualCluster=vc, extras=extras)
    job = make_job(config, user="bob", state=JobState.RUNNING,
                   tasks=[make_task("main", 0, TaskState.RUNNING, node_id="n0", gpus=range(n_gpus))])
    return job.model_copy(update={"launched_ms": T0 + started_s * 1000})


@pytest.mark.parametrize(("jobs", "expected"), [
    ([running("b1", "b", 2, 1), running("b2", "b", 2, 2)], {}),
    ([running("b1", "b", 2, 1), running("b2", "b", 2, 2), running("b3", "b", 2, 3)], {"bob~b3": ("a",)}),
    # the order they started in counts, not the order they came in
    ([running("b3", "b", 2, 3), running("b1", "b", 2, 1), running("b2", "b", 2, 2)], {"bob~b3": ("a",)}),
    # the job whose start took b past its quota borrows, though part of it is within
    ([running("b1", "b", 3, 1), running("b2", "b", 2, 2)], {"bob~b2": ("a",)}),
    ([running("b1", "b", 2, 1), running("b2", "b", 2, 2), running("b3", "b", 1, 3), running("b4", "b", 1, 4)],
     {"bob~b3": ("a",), "bob~b4": ("a",)}),
    # opportunistic jobs count in no quota and are never borrowers, however young
    ([running("o", "b", 4, 0, priority="oppo"), running("b1", "b", 2, 1), running("b2", "b", 2, 2)], {}),
    ([running("b1", "b", 2, 1), running("b2", "b", 2, 2), running("b3", "b", 2, 3),
      running("o", "b", 2, 9, priority="oppo")], {"bob~b3": ("a",)}),
    # a is within its quota: no borrower there
    ([running("a1", "a", 4, 1), running("b1", "b", 4, 2)], {}),
])
def test_the_youngest_jobs_of_an_over_quota_vc_borrow(jobs: list[JobRecord],
                                                      expected: dict[str, tuple[str, ...]]) -> None:
    assert borrowers(jobs, VCS, CAPACITY) == expected


def test_borrowers_name_every_vc_that_lends() -> None:
    vcs = with_default([VirtualCluster(name="a", quota=Quota(cpus=25, memory=25, gpus=25)),
                        VirtualCluster(name="c", quota=Quota(cpus=25, memory=25, gpus=25)), B])
    jobs = [running("b1", "b", 4, 1), running("b2", "b", 2, 2)]
    assert borrowers(jobs, vcs, CAPACITY) == {"bob~b2": ("a", "c")}
    # c's GPUs all in use: its idle CPUs and memory still make it a lender (any idle resource does)
    assert borrowers([*jobs, running("c1", "c", 2, 0)], vcs, CAPACITY) == {"bob~b2": ("a", "c")}


def test_oppo_jobs_count_in_no_quota() -> None:
    jobs = [running("o", "a", 4, 0, priority="oppo"), running("a1", "a", 1, 1), running("b1", "b", 2, 1)]
    assert [counts_in_quota(j) for j in jobs] == [False, True, True]
    assert quota_usage(jobs) == {"a": gpus(1, cpus=1, memory_mb=100), "b": gpus(2, cpus=1, memory_mb=100)}


# --- borrowed and lent, per VC ----------------------------------------------------------------------------


def test_borrowing_is_spread_over_the_lenders_by_their_idle_quota() -> None:
    # a 50% (4 GPUs), b and c 25% (2 each): c runs 4 GPUs (borrows 2); a and b idle lend 4/6 and 2/6 of it.
    vcs = with_default([A, VirtualCluster(name="b", quota=Quota(gpus=25)),
                        VirtualCluster(name="c", quota=Quota(gpus=25), borrowing=HALF)])
    spread = borrowed_and_lent(vcs, CAPACITY, {"c": gpus(4)})
    assert spread["c"] == (gpus(2), Resources())
    assert spread["a"][0] == Resources() and spread["a"][1].gpus == pytest.approx(4 / 3)
    assert spread["b"][0] == Resources() and spread["b"][1].gpus == pytest.approx(2 / 3)
    assert spread["default"][1].gpus == 0
    assert sum(lent.gpus for _, lent in spread.values()) == pytest.approx(2), "all that is borrowed is lent"


def test_nothing_is_lent_while_no_one_borrows() -> None:
    spread = borrowed_and_lent(VCS, CAPACITY, {"a": gpus(1), "b": gpus(4)})
    assert spread == {name: (Resources(), Resources()) for name in VCS}
