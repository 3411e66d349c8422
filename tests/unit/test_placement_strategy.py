"""Placement's choices among nodes that all fit: pack or spread, and ties broken by a seed that replays."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from shared.jobconfig.model import JobConfig
from shared.records import NodeRecord
from shared.scheduling.placement import ClusterSnapshot, Plan, default_strategy, place
from tests.unit.factories import make_config, make_node, make_nodes, placed_job, port_dict, role_dict

pytestmark = pytest.mark.unit


def planned(nodes: list[NodeRecord], config: JobConfig, **how: Any) -> Plan:
    result = place(ClusterSnapshot.build(nodes, []), config, **how)
    assert isinstance(result, Plan), getattr(result, "reason", result)
    return result


def per_node(plan: Plan) -> list[int]:
    """How many tasks each used node got, most first."""
    return sorted(Counter(t.node_id for t in plan.tasks).values(), reverse=True)


# --- the default -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("roles", "expected"),
    [
        ([role_dict(gpuNumber=1)], "pack"),
        ([role_dict(gpuNumber=0)], "spread"),
        ([role_dict("ps"), role_dict("worker", gpuNumber=2)], "pack"),
        ([role_dict("ps"), role_dict("worker")], "spread"),
    ],
    ids=["gpu-job", "cpu-job", "gpu-workers-cpu-ps", "two-cpu-roles"],
)
def test_gpu_jobs_pack_and_cpu_jobs_spread_by_default(roles: list[dict[str, Any]], expected: str) -> None:
    assert default_strategy(make_config(*roles)) == expected


def test_a_default_gpu_job_fills_one_node_and_a_cpu_job_of_the_same_shape_spreads() -> None:
    nodes = make_nodes(4, cpus=8, gpus=["V100"] * 8)
    assert per_node(planned(nodes, make_config(role_dict(taskNumber=4, gpuNumber=1)))) == [4]
    assert per_node(planned(nodes, make_config(role_dict(taskNumber=4)))) == [1, 1, 1, 1]


# --- pack --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("nodes", "role", "expected"),
    [
        (make_nodes(3, gpus=["V100"] * 4), dict(taskNumber=6, gpuNumber=1), [4, 2]),
        (make_nodes(3, gpus=["V100"] * 4), dict(taskNumber=3, gpuNumber=2), [2, 1]),
        (make_nodes(3, cpus=4), dict(taskNumber=6, cpuNumber=1), [4, 2]),
        (make_nodes(3, cpus=8), dict(taskNumber=3, cpuNumber=3), [2, 1]),
    ],
    ids=["1-gpu-tasks", "2-gpu-tasks", "1-cpu-tasks", "3-cpu-tasks"],
)
def test_pack_fills_a_node_before_the_next(nodes: list[NodeRecord], role: dict[str, Any],
                                            expected: list[int]) -> None:
    plan = planned(nodes, make_config(role_dict(**role)), strategy="pack")
    assert per_node(plan) == expected
    first = plan.tasks[0].node_id
    assert [t.node_id for t in plan.tasks[:expected[0]]] == [first] * expected[0], "the first node fills first"


@pytest.mark.parametrize(
    ("free", "gpus", "expected"),
    [
        ({"a": 8, "b": 2, "c": 4}, 2, "b"),
        ({"a": 8, "b": 2, "c": 4}, 3, "c"),
        ({"a": 8, "b": 2, "c": 4}, 5, "a"),
        ({"a": 1, "b": 1, "c": 3}, 1, "a|b"),
    ],
)
def test_pack_takes_the_node_with_the_fewest_free_gpus_that_fit(free: dict[str, int], gpus: int,
                                                                 expected: str) -> None:
    nodes = [make_node(name, gpus=["V100"] * n) for name, n in free.items()]
    for seed in range(5):
        plan = planned(nodes, make_config(role_dict(gpuNumber=gpus)), strategy="pack", seed=seed)
        assert plan.tasks[0].node_id in expected.split("|")


def test_pack_counts_only_gpus_of_the_asked_type() -> None:
    # v100s has 1 free V100 and many K80s; v100m has 3 free V100s: a 1-V100 task packs onto v100s.
    nodes = [make_node("v100m", gpus=["V100"] * 3), make_node("v100s", gpus=["K80"] * 7 + ["V100"])]
    plan = planned(nodes, make_config(role_dict(gpuNumber=1), gpuType="V100"), strategy="pack")
    assert (plan.tasks[0].node_id, plan.tasks[0].gpus) == ("v100s", (7,))


def test_pack_moves_on_when_the_best_fit_node_fails_another_check() -> None:
    nodes = [make_node("tight", cpus=1, gpus=["V100"]), make_node("roomy", cpus=8, gpus=["V100"] * 8)]
    plan = planned(nodes, make_config(role_dict(cpuNumber=2, gpuNumber=1)), strategy="pack")
    assert plan.tasks[0].node_id == "roomy"


# --- spread ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("nodes", "role"),
    [
        (make_nodes(4, gpus=["V100"] * 8), dict(taskNumber=4, gpuNumber=1)),
        (make_nodes(4, cpus=8), dict(taskNumber=4, cpuNumber=1)),
        ([make_node("big", cpus=64), *make_nodes(3, cpus=4)], dict(taskNumber=4, cpuNumber=1)),
        ([make_node("big", gpus=["V100"] * 8), *make_nodes(2, gpus=["V100"] * 2)], dict(taskNumber=3, gpuNumber=1)),
    ],
    ids=["gpu-alike", "cpu-alike", "cpu-one-big-node", "gpu-one-big-node"],
)
def test_spread_puts_tasks_on_distinct_nodes_when_possible(nodes: list[NodeRecord], role: dict[str, Any]) -> None:
    for seed in range(5):
        plan = planned(nodes, make_config(role_dict(**role)), strategy="spread", seed=seed)
        assert per_node(plan) == [1] * role["taskNumber"]


def test_spread_shares_nodes_only_when_there_are_too_few() -> None:
    plan = planned(make_nodes(2, cpus=8), make_config(role_dict(taskNumber=5)), strategy="spread")
    assert per_node(plan) == [3, 2]


def test_spread_takes_the_node_with_the_most_free_gpus() -> None:
    nodes = [make_node("a", gpus=["V100"] * 2), make_node("b", gpus=["V100"] * 8), make_node("c", gpus=["V100"] * 4)]
    plan = planned(nodes, make_config(role_dict(taskNumber=2, gpuNumber=1)), strategy="spread")
    assert [t.node_id for t in plan.tasks] == ["b", "c"]


def test_spread_still_places_a_gang_that_only_fits_by_sharing_a_node() -> None:
    nodes = [make_node("a", cpus=1), make_node("b", cpus=4)]
    plan = planned(nodes, make_config(role_dict(taskNumber=4)), strategy="spread")
    assert sorted(t.node_id for t in plan.tasks) == ["a", "b", "b", "b"]


# --- seeds -------------------------------------------------------------------------------------


def test_the_same_seed_gives_the_same_plan() -> None:
    nodes = make_nodes(12, cpus=16, gpus=["V100"] * 4)
    config = make_config(role_dict("ps", taskNumber=3, portList=[port_dict("http")]),
                         role_dict("worker", taskNumber=5, gpuNumber=2, portList=[port_dict("ssh", 0, 2)]))
    for strategy in ("pack", "spread"):
        for seed in (0, 1, 42, 2**40):
            plans = [planned(nodes, config, seed=seed, strategy=strategy) for _ in range(3)]
            assert plans[0] == plans[1] == plans[2]


def test_ties_go_to_different_nodes_under_different_seeds() -> None:
    nodes = make_nodes(8, gpus=["V100"] * 8)
    config = make_config(role_dict(gpuNumber=1))
    chosen = {planned(nodes, config, seed=seed).tasks[0].node_id for seed in range(40)}
    assert len(chosen) >= 4, chosen


def test_a_rebuilt_snapshot_replays_the_plan_of_one_that_held_the_same_jobs() -> None:
    """The scheduler rebuilds its snapshot from MongoDB: the plan for a seed must not depend on whether
    the running jobs were held in this snapshot or read back from the store."""
    nodes = make_nodes(6, cpus=8, gpus=["V100"] * 4, port_range=(20000, 20009))
    first = [make_config(role_dict(taskNumber=t, gpuNumber=g, portList=[port_dict("p", 0, 2)]), jobName=f"j{t}{g}")
             for t, g in ((3, 1), (2, 2), (1, 4))]
    held = ClusterSnapshot.build(nodes, [])
    jobs = []
    for config in first:
        plan = place(held, config, seed=7)
        assert isinstance(plan, Plan)
        held.hold(plan, config)
        jobs.append(placed_job(config, plan))
    rebuilt = ClusterSnapshot.build(nodes, jobs)
    config = make_config(role_dict(taskNumber=4, gpuNumber=1, portList=[port_dict("q")]))
    for seed in range(10):
        assert place(held, config, seed=seed) == place(rebuilt, config, seed=seed)


def test_a_failed_placement_does_not_change_the_next_plan() -> None:
    nodes = make_nodes(4, cpus=4, gpus=["V100"] * 2)
    snap = ClusterSnapshot.build(nodes, [])
    config = make_config(role_dict(taskNumber=3, gpuNumber=1))
    before = place(snap, config, seed=3)
    assert not isinstance(place(snap, make_config(role_dict(taskNumber=9, gpuNumber=1)), seed=3), Plan)
    assert place(snap, config, seed=3) == before
