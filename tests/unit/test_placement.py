"""Gang placement: all tasks or none, resources by the numbers, GPUs by type, ports without conflicts."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shared.jobconfig.model import JobConfig
from shared.records import NodeRecord, TaskState
from shared.scheduling.placement import ClusterSnapshot, Plan, Unplaceable, place
from shared.scheduling.placement.snapshot import Claim
from tests.unit.factories import make_config, make_node, placed_job, port_dict, role_dict

pytestmark = pytest.mark.unit


def snapshot(*nodes: NodeRecord, jobs: tuple[Any, ...] = ()) -> ClusterSnapshot:
    return ClusterSnapshot.build(nodes, jobs)


def planned(snap: ClusterSnapshot, config: JobConfig) -> Plan:
    result = place(snap, config)
    assert isinstance(result, Plan), getattr(result, "reason", result)
    return result


def planned_with(snap: ClusterSnapshot, config: JobConfig, **how: Any) -> Plan:
    result = place(snap, config, **how)
    assert isinstance(result, Plan), getattr(result, "reason", result)
    return result


def unplaceable(snap: ClusterSnapshot, config: JobConfig) -> Unplaceable:
    result = place(snap, config)
    assert isinstance(result, Unplaceable), f"expected no fit, got {result!r}"
    return result


def nodes_of(plan: Plan) -> list[str]:
    return [t.node_id for t in plan.tasks]


# --- gang: all or nothing ---------------------------------------------------------------------


def test_four_tasks_on_three_nodes_that_each_fit_one_waits_with_counts() -> None:
    snap = snapshot(*(make_node(f"n{i}", cpus=2) for i in range(3)))
    config = make_config(role_dict("w", taskNumber=4, cpuNumber=2))
    result = unplaceable(snap, config)
    assert result.task == "w[3]"
    assert result.counts == {"lack 2 free CPUs": 3}
    assert result.reason == "task w[3] fits on no node: 3 nodes lack 2 free CPUs"


def test_gang_that_does_not_fit_holds_nothing() -> None:
    snap = snapshot(*(make_node(f"n{i}", cpus=2) for i in range(3)))
    unplaceable(snap, make_config(role_dict("w", taskNumber=4, cpuNumber=2)))
    # Nothing of the failed attempt stays behind: a 3-task job of the same shape fits entirely.
    plan = planned(snap, make_config(role_dict("w", taskNumber=3, cpuNumber=2)))
    assert sorted(nodes_of(plan)) == ["n0", "n1", "n2"]
    assert all(u.cpus == 0 for u in snap.usage.values())


def test_gang_fits_when_a_fourth_node_joins() -> None:
    snap = snapshot(*(make_node(f"n{i}", cpus=2) for i in range(4)))
    plan = planned(snap, make_config(role_dict("w", taskNumber=4, cpuNumber=2)))
    assert [(t.role, t.index) for t in plan.tasks] == [("w", 0), ("w", 1), ("w", 2), ("w", 3)]
    assert sorted(nodes_of(plan)) == ["n0", "n1", "n2", "n3"]


def test_second_role_that_does_not_fit_fails_the_whole_job() -> None:
    snap = snapshot(make_node("n1", cpus=4, gpus=["V100"]))
    config = make_config(role_dict("ps", taskNumber=2), role_dict("worker", gpuNumber=2))
    result = unplaceable(snap, config)
    assert result.task == "worker[0]"
    assert result.counts == {"lack 2 free GPUs": 1}


def test_pack_is_best_fit_and_roles_go_in_config_order() -> None:
    snap = snapshot(make_node("a", cpus=3), make_node("b", cpus=8))
    config = make_config(role_dict("ps", taskNumber=2), role_dict("worker", taskNumber=2, cpuNumber=2))
    plan = planned_with(snap, config, strategy="pack")
    assert [(t.role, t.index, t.node_id) for t in plan.tasks] == [
        ("ps", 0, "a"), ("ps", 1, "a"), ("worker", 0, "b"), ("worker", 1, "b")]
    assert plan.for_task("worker", 1).ip == snap.nodes[1].ip


# --- CPU, memory, GPU ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("node", "role", "gpu_type", "counts"),
    [
        (dict(cpus=3), dict(cpuNumber=4), "", {"lack 4 free CPUs": 1}),
        (dict(cpus=0), dict(cpuNumber=1), "", {"lack 1 free CPU": 1}),
        (dict(memory_mb=4096), dict(memoryMB=4097), "", {"lack 4097 MB of free memory": 1}),
        (dict(gpus=["V100"]), dict(gpuNumber=2), "", {"lack 2 free GPUs": 1}),
        (dict(), dict(gpuNumber=1), "", {"lack 1 free GPU": 1}),
        (dict(gpus=["K80", "K80"]), dict(gpuNumber=1), "V100", {"lack 1 free GPU of type V100": 1}),
        (dict(gpus=["K80", "V100"]), dict(gpuNumber=2), "V100", {"lack 2 free GPUs of type V100": 1}),
    ],
    ids=["cpus", "cpu-singular", "memory", "gpus", "no-gpu", "gpu-type", "gpu-type-count"],
)
def test_a_node_that_lacks_a_resource_is_counted_with_the_reason(
    node: dict[str, Any], role: dict[str, Any], gpu_type: str, counts: dict[str, int],
) -> None:
    config = make_config(role_dict(**role), gpuType=gpu_type)
    assert unplaceable(snapshot(make_node("n1", **node)), config).counts == counts


@pytest.mark.parametrize(
    ("node", "role", "gpu_type"),
    [
        (dict(cpus=4), dict(cpuNumber=4), ""),
        (dict(memory_mb=4096), dict(memoryMB=4096), ""),
        (dict(gpus=["V100", "V100"]), dict(gpuNumber=2), ""),
        (dict(gpus=["K80", "V100"]), dict(gpuNumber=1), "V100"),
        (dict(), dict(gpuNumber=0), "V100"),
    ],
    ids=["cpus-exact", "memory-exact", "gpus-exact", "gpu-type", "no-gpu-asked-type-ignored"],
)
def test_a_task_that_exactly_fits_is_placed(node: dict[str, Any], role: dict[str, Any], gpu_type: str) -> None:
    config = make_config(role_dict(**role), gpuType=gpu_type)
    assert nodes_of(planned(snapshot(make_node("n1", **node)), config)) == ["n1"]


def test_counts_group_nodes_by_reason() -> None:
    snap = snapshot(
        make_node("a", cpus=1), make_node("b", cpus=1),
        make_node("c", gpus=["K80"]), make_node("d", memory_mb=512), make_node("e", gpus=["K80", "K80"]),
    )
    config = make_config(role_dict(cpuNumber=2, memoryMB=1024, gpuNumber=1), gpuType="V100")
    result = unplaceable(snap, config)
    assert result.counts == {"lack 2 free CPUs": 2, "lack 1024 MB of free memory": 1,
                             "lack 1 free GPU of type V100": 2}
    assert "2 nodes lack 2 free CPUs" in result.reason
    assert "2 nodes lack 1 free GPU of type V100" in result.reason


def test_reason_for_a_single_node_reads_as_english() -> None:
    """STYLE.md's example reason: "4 nodes lack 2 free GPUs of type V100, 1 node lacks ports"."""
    result = unplaceable(snapshot(make_node("n1", cpus=1)), make_config(role_dict(cpuNumber=2)))
    assert "1 node lacks 2 free CPUs" in result.reason, result.reason


def test_gpu_type_picks_only_gpus_of_that_type() -> None:
    node = make_node("n1", gpus=[(0, "K80"), (1, "V100"), (2, "K80"), (3, "V100")])
    plan = planned(snapshot(node), make_config(role_dict(gpuNumber=2), gpuType="V100"))
    assert plan.tasks[0].gpus == (1, 3)


def test_gpu_type_skips_nodes_of_another_type() -> None:
    snap = snapshot(make_node("k", gpus=["K80"] * 8), make_node("v", gpus=["V100"]))
    plan = planned(snap, make_config(role_dict(gpuNumber=1), gpuType="V100"))
    assert nodes_of(plan) == ["v"]


def test_without_gpu_type_any_gpu_serves() -> None:
    node = make_node("n1", gpus=[(0, "K80"), (1, "V100")])
    assert planned(snapshot(node), make_config(role_dict(gpuNumber=2))).tasks[0].gpus == (0, 1)


def test_tasks_on_one_node_get_distinct_gpu_indices() -> None:
    node = make_node("n1", cpus=16, gpus=["V100"] * 8)
    plan = planned(snapshot(node), make_config(role_dict(taskNumber=3, gpuNumber=2)))
    assert [t.gpus for t in plan.tasks] == [(0, 1), (2, 3), (4, 5)]


def test_gpus_held_by_a_running_job_are_not_given_again() -> None:
    node = make_node("n1", gpus=["V100"] * 4)
    other = make_config(role_dict(gpuNumber=2), jobName="other")
    running = placed_job(other, planned(snapshot(node), other))
    plan = planned(snapshot(node, jobs=(running,)), make_config(role_dict(gpuNumber=2)))
    assert plan.tasks[0].gpus == (2, 3)
    result = unplaceable(snapshot(node, jobs=(running,)), make_config(role_dict(gpuNumber=3)))
    assert result.counts == {"lack 3 free GPUs": 1}


def test_gpu_number_zero_gets_no_gpus() -> None:
    plan = planned(snapshot(make_node("n1", gpus=["V100"])), make_config(role_dict(gpuNumber=0)))
    assert plan.tasks[0].gpus == ()


# --- ports ------------------------------------------------------------------------------------


def test_fixed_ports_taken_by_a_running_job_send_the_task_elsewhere() -> None:
    n1, n2 = make_node("n1"), make_node("n2")
    fixed = make_config(role_dict(portList=[port_dict("http", 30000, 2)]))
    running = placed_job(fixed, planned(snapshot(n1), fixed))
    assert running.tasks[0].ports == {"http": (30000, 30001), "ssh": (20000,)}
    plan = planned(snapshot(n1, n2, jobs=(running,)), make_config(role_dict(portList=[port_dict("web", 30001)])))
    assert nodes_of(plan) == ["n2"]
    assert plan.tasks[0].ports == {"web": (30001,), "http": (20000,), "ssh": (20001,)}


def test_fixed_port_taken_everywhere_is_the_reason() -> None:
    n1 = make_node("n1")
    fixed = make_config(role_dict(portList=[port_dict("http", 30000, 2)]))
    running = placed_job(fixed, planned(snapshot(n1), fixed))
    result = unplaceable(snapshot(n1, jobs=(running,)), make_config(role_dict(portList=[port_dict("ssh", 29999, 2)])))
    assert result.counts == {"have port 29999-30000 (ssh) taken": 1}


def test_fixed_ports_collide_between_tasks_of_one_job_on_one_node() -> None:
    config = make_config(role_dict(taskNumber=2, portList=[port_dict("http", 30000)]))
    result = unplaceable(snapshot(make_node("n1", cpus=64)), config)
    assert result.task == "main[1]"
    assert result.counts == {"have port 30000 (http) taken": 1}
    plan = planned(snapshot(make_node("n1", cpus=64), make_node("n2")), config)
    assert nodes_of(plan) == ["n1", "n2"]
    assert [t.ports for t in plan.tasks] == [{"http": (30000,), "ssh": (20000,)}] * 2


def test_fixed_ports_collide_between_roles_on_one_node() -> None:
    config = make_config(role_dict("a", portList=[port_dict("x", 30000, 3)]),
                         role_dict("b", portList=[port_dict("y", 30002)]))
    plan = planned(snapshot(make_node("n1"), make_node("n2")), config)
    assert sorted(nodes_of(plan)) == ["n1", "n2"]


def test_fixed_ports_may_lie_outside_the_node_range() -> None:
    plan = planned(snapshot(make_node("n1", port_range=(20000, 20010))),
                   make_config(role_dict(portList=[port_dict("http", 8080)])))
    assert plan.tasks[0].ports == {"http": (8080,), "ssh": (20000,)}


def test_random_ports_come_from_the_node_range_and_never_collide() -> None:
    node = make_node("n1", cpus=64, port_range=(20000, 20005))
    config = make_config(role_dict(taskNumber=3, portList=[port_dict("http", 0, 1), port_dict("ssh", 0, 1)]))
    plan = planned(snapshot(node), config)
    ports = [p for t in plan.tasks for ps in t.ports.values() for p in ps]
    assert sorted(ports) == list(range(20000, 20006))
    assert [list(t.ports) for t in plan.tasks] == [["http", "ssh"]] * 3


def test_random_ports_run_out_with_a_reason() -> None:
    # Each task takes 3 ports of the range: its 2 ``ssh`` and the default ``http``; two tasks fill it.
    node = make_node("n1", cpus=64, port_range=(20000, 20005))
    config = make_config(role_dict(taskNumber=3, portList=[port_dict("ssh", 0, 2)]))
    result = unplaceable(snapshot(node), config)
    assert result.task == "main[2]"
    assert result.counts == {"lack 2 free ports in 20000-20005": 1}


def test_random_ports_skip_ports_held_by_running_jobs() -> None:
    node = make_node("n1", port_range=(20000, 20009))
    fixed = make_config(role_dict(portList=[port_dict("a", 20000, 3)]), jobName="fixed")
    running = placed_job(fixed, planned(snapshot(node), fixed))
    assert running.tasks[0].ports == {"a": (20000, 20001, 20002), "http": (20003,), "ssh": (20004,)}
    plan = planned(snapshot(node, jobs=(running,)), make_config(role_dict(portList=[port_dict("r", 0, 2)])))
    assert plan.tasks[0].ports == {"r": (20005, 20006), "http": (20007,), "ssh": (20008,)}


def test_random_ports_of_a_task_leave_its_fixed_ports_alone() -> None:
    node = make_node("n1", port_range=(20000, 20009))
    config = make_config(role_dict(portList=[port_dict("rand", 0, 2), port_dict("fixed", 20000, 1)]))
    ports = planned(snapshot(node), config).tasks[0].ports
    assert ports == {"rand": (20001, 20002), "fixed": (20000,), "http": (20003,), "ssh": (20004,)}
    assert list(ports) == ["rand", "fixed", "http", "ssh"], "labels keep the config's order, defaults last"


def test_every_role_gets_one_http_and_one_ssh_port_unless_it_declares_them() -> None:
    """OpenPAI v0.14's rest-server added ``http`` and ``ssh`` (one platform-chosen port each) to every
    role whose portList did not declare them; placement finds those ports like any other."""
    node = make_node("n1", port_range=(20000, 20009))
    bare = planned(snapshot(node), make_config(role_dict())).tasks[0].ports
    assert list(bare) == ["http", "ssh"]
    assert len(bare["http"]) == len(bare["ssh"]) == 1 and bare["http"] != bare["ssh"]
    assert all(20000 <= p <= 20009 for ps in bare.values() for p in ps)
    assert bare == {"http": (20000,), "ssh": (20001,)}
    # A declared http keeps its 3 ports; ssh is still added, once.
    http3 = planned(snapshot(node), make_config(role_dict(portList=[port_dict("http", 0, 3)]))).tasks[0].ports
    assert http3 == {"http": (20000, 20001, 20002), "ssh": (20003,)}
    # Both declared (one fixed, outside the range): nothing added.
    both = make_config(role_dict(portList=[port_dict("ssh", 0, 2), port_dict("http", 30000)]))
    assert planned(snapshot(node), both).tasks[0].ports == {"ssh": (20000, 20001), "http": (30000,)}
    # The defaults count against the range: 2 declared ports fit in 3, but with http and ssh a task
    # needs 4. A range of exactly 4 takes it.
    web2 = make_config(role_dict(portList=[port_dict("web", 0, 2)]))
    result = unplaceable(snapshot(make_node("n1", port_range=(20000, 20002))), web2)
    assert result.counts == {"lack 1 free port in 20000-20002": 1}
    assert "1 node lacks 1 free port in 20000-20002" in result.reason
    assert planned(snapshot(make_node("n1", port_range=(20000, 20003))), web2).tasks[0].ports == {
        "web": (20000, 20001), "http": (20002,), "ssh": (20003,)}
    # A bare role on a one-port range: http gets it, ssh lacks one.
    assert unplaceable(snapshot(make_node("n1", port_range=(20000, 20000))), make_config()).counts == {
        "lack 1 free port in 20000-20000": 1}


@settings(max_examples=100, deadline=None, database=None)
@given(
    n_nodes=st.integers(1, 3),
    range_size=st.integers(1, 12),
    tasks=st.integers(1, 6),
    labels=st.lists(st.tuples(st.integers(1, 3), st.booleans()), min_size=1, max_size=3),
    gpus=st.integers(0, 2),
)
def test_any_plan_respects_capacity_and_never_double_books(
    n_nodes: int, range_size: int, tasks: int, labels: list[tuple[int, bool]], gpus: int,
) -> None:
    nodes = [make_node(f"n{i}", cpus=4, gpus=["V100"] * 3, port_range=(20000, 20000 + range_size - 1))
             for i in range(n_nodes)]
    # Fixed spans 20002+4j never overlap each other, but may overlap the nodes' random range.
    ports = [port_dict(f"p{j}", 20002 + 4 * j if fixed else 0, count) for j, (count, fixed) in enumerate(labels)]
    config = make_config(role_dict(taskNumber=tasks, cpuNumber=1, gpuNumber=gpus, portList=ports))
    result = place(snapshot(*nodes), config)
    if isinstance(result, Unplaceable):
        assert sum(result.counts.values()) == n_nodes
        return
    assert len(result.tasks) == tasks
    by_node: dict[str, list[Any]] = defaultdict(list)
    specs = config.task_roles[0].ports  # the portList and the default http and ssh
    for t in result.tasks:
        by_node[t.node_id].append(t)
        assert list(t.ports) == [spec.label for spec in specs]
        for spec in specs:
            assert len(t.ports[spec.label]) == spec.port_number
            if spec.begin_at:
                assert t.ports[spec.label] == tuple(range(spec.begin_at, spec.begin_at + spec.port_number))
            else:
                assert all(20000 <= p < 20000 + range_size for p in t.ports[spec.label])
    for placed in by_node.values():
        assert len(placed) <= 4
        all_gpus = [g for t in placed for g in t.gpus]
        assert len(all_gpus) == len(set(all_gpus)) and set(all_gpus) <= {0, 1, 2}
        all_ports = [p for t in placed for ps in t.ports.values() for p in ps]
        assert len(all_ports) == len(set(all_ports))


# --- what the snapshot counts -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("state", "held"),
    [(TaskState.WAITING, True), (TaskState.RUNNING, True), (TaskState.SUCCEEDED, False),
     (TaskState.FAILED, False), (TaskState.STOPPED, False)],
)
def test_only_non_final_tasks_of_placed_jobs_use_resources(state: TaskState, held: bool) -> None:
    node = make_node("n1", cpus=4, memory_mb=4096, gpus=["V100"] * 2, port_range=(20000, 20003))
    other = make_config(role_dict(cpuNumber=3, memoryMB=3000, gpuNumber=2, portList=[port_dict("a", 0, 2)]),
                        jobName="other")
    job = placed_job(other, planned(snapshot(node), other), state)
    usage = snapshot(node, jobs=(job,)).usage["n1"]
    if held:
        # The two ``a`` ports and the default http and ssh: the whole range.
        assert (usage.cpus, usage.memory_mb, usage.gpus, usage.ports) == (3, 3000, {0, 1}, set(range(20000, 20004)))
    else:
        assert (usage.cpus, usage.memory_mb, usage.gpus, usage.ports) == (0, 0, set(), set())
    result = place(snapshot(node, jobs=(job,)), make_config(role_dict(cpuNumber=2)))
    assert isinstance(result, Unplaceable) is held


def test_usage_adds_up_over_jobs_and_tasks() -> None:
    node = make_node("n1", cpus=16, memory_mb=10000)
    a = make_config(role_dict(taskNumber=2, cpuNumber=3, memoryMB=1000), jobName="a")
    b = make_config(role_dict(cpuNumber=5, memoryMB=2500), jobName="b")
    jobs = (placed_job(a, planned(snapshot(node), a)), placed_job(b, planned(snapshot(node), b), user="carol"))
    usage = snapshot(node, jobs=jobs).usage["n1"]
    assert (usage.cpus, usage.memory_mb) == (11, 4500)


def test_tasks_on_lost_or_unknown_nodes_are_ignored() -> None:
    live, lost = make_node("live"), make_node("lost", lost=True)
    config = make_config(role_dict(cpuNumber=8), jobName="other")
    job = placed_job(config, planned(snapshot(lost.model_copy(update={"lost": False})), config))
    snap = snapshot(live, lost, jobs=(job,))
    assert [n.id for n in snap.nodes] == ["live"]
    assert set(snap.usage) == {"live"} and snap.usage["live"].cpus == 0


def test_lost_nodes_are_never_chosen() -> None:
    snap = snapshot(make_node("gone", lost=True, cpus=64), make_node("small", cpus=1))
    assert nodes_of(planned(snap, make_config())) == ["small"]
    result = unplaceable(snap, make_config(role_dict(cpuNumber=2)))
    assert result.counts == {"lack 2 free CPUs": 1}, "a lost node is not even counted"


@pytest.mark.parametrize("nodes", [(), (make_node("gone", lost=True),)], ids=["none", "all-lost"])
def test_no_live_node_is_its_own_reason(nodes: tuple[NodeRecord, ...]) -> None:
    result = unplaceable(snapshot(*nodes), make_config())
    assert result.counts == {}
    assert result.reason == "no live node is registered"


# --- place is pure; hold commits ----------------------------------------------------------------


def test_place_does_not_change_the_snapshot_but_hold_does() -> None:
    node = make_node("n1", cpus=4, memory_mb=1000, gpus=["V100"] * 2, port_range=(20000, 20009))
    snap = snapshot(node)
    config = make_config(role_dict(cpuNumber=3, memoryMB=600, gpuNumber=1, portList=[port_dict("p", 0, 2)]))
    plan = planned(snap, config)
    assert planned(snap, config) == plan, "placing again without hold gives the same plan"
    snap.hold(plan, config)
    usage = snap.usage["n1"]
    assert plan.tasks[0].ports == {"p": (20000, 20001), "http": (20002,), "ssh": (20003,)}
    assert (usage.cpus, usage.memory_mb, usage.gpus, usage.ports) == (3, 600, {0}, set(range(20000, 20004)))
    result = unplaceable(snap, config)
    assert result.counts == {"lack 3 free CPUs": 1}


def test_hold_lets_one_pass_place_several_jobs_without_overlap() -> None:
    snap = snapshot(make_node("n1", gpus=["V100"] * 2), make_node("n2", gpus=["V100"] * 2))
    configs = [make_config(role_dict(gpuNumber=2, portList=[port_dict("ssh")]), jobName=f"j{i}") for i in range(3)]
    first = planned(snap, configs[0])
    snap.hold(first, configs[0])
    second = planned(snap, configs[1])
    snap.hold(second, configs[1])
    assert sorted(nodes_of(first) + nodes_of(second)) == ["n1", "n2"]
    assert unplaceable(snap, configs[2]).counts == {"lack 2 free GPUs": 2}


def test_a_big_job_gets_distinct_ports_from_the_bottom_of_the_range_and_given_back_ports_are_reused() -> None:
    node = make_node("n1", cpus=4096, memory_mb=4096 * 1024, port_range=(20000, 29999))
    snapshot = ClusterSnapshot.build([node], [])
    config = make_config(role_dict("w", taskNumber=3000, cpuNumber=1, memoryMB=100, portList=[port_dict("http")]))
    plan = place(snapshot, config, seed=1)
    assert isinstance(plan, Plan)
    assert all(list(t.ports) == ["http", "ssh"] for t in plan.tasks)
    ports = sorted(p for t in plan.tasks for ps in t.ports.values() for p in ps)
    assert ports == list(range(20000, 26000)), "the lowest free ports (http and the default ssh), each once"
    state = snapshot.by_id["n1"]
    snapshot.hold(plan, config)
    assert state.port_floor == 26000, "below the floor every port is taken"
    first = plan.tasks[0]
    given_back = first.ports["http"] + first.ports["ssh"]
    snapshot.give(state, Claim(1, 100, (), given_back))
    assert state.port_floor == min(given_back), "a port given back lowers the floor"
    again = place(snapshot, make_config(role_dict("x", portList=[port_dict("http")])), seed=2)
    assert isinstance(again, Plan) and again.tasks[0].ports == first.ports, "the ports given back, reused"
