"""The indexes behind placement against a plain scan: same answers, same counts, never a double booking.

The oracle here is the obvious algorithm (look at every node, in the checker order CPU, memory, GPUs,
ports), written from the node records and the usage alone, so it shares no code with the indexes.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shared.jobconfig.model import JobConfig, TaskRole
from shared.records import NodeRecord
from shared.scheduling.placement import ClusterSnapshot, NodeUsage, Plan, Unplaceable, place
from shared.scheduling.placement.checks import Ask
from shared.scheduling.placement.order import candidates
from tests.unit.factories import make_config, make_node, make_nodes, port_dict, role_dict

pytestmark = pytest.mark.unit

TYPES = ("V100", "K80")


def _s(n: int) -> str:
    return "s" if n != 1 else ""


def port_specs(role: TaskRole) -> list[tuple[str, int, int]]:
    """(label, beginAt, portNumber) of every port a task of ``role`` gets: its portList, then one
    platform-chosen port for each of OpenPAI's default labels ``http`` and ``ssh`` it does not declare."""
    specs = [(s.label, s.begin_at, s.port_number) for s in role.port_list]
    declared = {label for label, _, _ in specs}
    return specs + [(label, 0, 1) for label in ("http", "ssh") if label not in declared]


def naive_reason(node: NodeRecord, u: NodeUsage, role: TaskRole, gpu_type: str) -> str | None:
    """Why ``node`` cannot take one task of ``role``, by looking at everything; None when it can."""
    if node.cpus - u.cpus < role.cpu_number:
        return f"lack {role.cpu_number} free CPU{_s(role.cpu_number)}"
    if node.memory_mb - u.memory_mb < role.memory_mb:
        return f"lack {role.memory_mb} MB of free memory"
    free_gpus = [g for g in node.gpus if g.index not in u.gpus and (not gpu_type or g.type == gpu_type)]
    if role.gpu_number and len(free_gpus) < role.gpu_number:
        kind = f" of type {gpu_type}" if gpu_type else ""
        return f"lack {role.gpu_number} free GPU{_s(role.gpu_number)}{kind}"
    taken = set(u.ports)
    specs = port_specs(role)
    for label, begin, count in (s for s in specs if s[1]):
        wanted = list(range(begin, begin + count))
        if taken.intersection(wanted):
            where = str(wanted[0]) if len(wanted) == 1 else f"{wanted[0]}-{wanted[-1]}"
            return f"have port {where} ({label}) taken"
        taken.update(wanted)
    lo, hi = node.port_range
    free_ports = sum(1 for p in range(lo, hi + 1) if p not in taken)
    for _, _, count in (s for s in specs if not s[1]):
        if free_ports < count:
            return f"lack {count} free port{_s(count)} in {lo}-{hi}"
        free_ports -= count
    return None


def fingerprint(snap: ClusterSnapshot) -> Any:
    """Everything the snapshot knows: the plain usage and every index."""
    usage = {k: (u.cpus, u.memory_mb, sorted(u.gpus), sorted(u.ports)) for k, u in snap.usage.items()}
    states = [(s.free_cpus, s.free_memory_mb, sorted(s.free_gpus.items(), key=str), s.ports_in_range)
              for s in snap.states]
    indexes = [(b.keys, sorted(b.groups.items())) for b in (snap.cpu_index, snap.memory_index)]
    gpus = {str(kind): (b.keys, sorted(b.groups.items())) for kind, b in snap.gpu_index.items()}
    return repr((usage, states, indexes, sorted(gpus.items())))


def rebuilt(snap: ClusterSnapshot) -> ClusterSnapshot:
    return ClusterSnapshot(snap.nodes, {k: u.copy() for k, u in snap.usage.items()})


# --- random clusters and jobs ------------------------------------------------------------------

nodes_st = st.lists(
    st.fixed_dictionaries({
        "cpus": st.integers(0, 8),
        "memory_mb": st.sampled_from([100, 500, 1000, 4000]),
        "gpus": st.lists(st.sampled_from(TYPES), max_size=4),
        "ports": st.integers(1, 12),
        "lost": st.sampled_from([False, False, False, True]),
    }),
    min_size=1, max_size=6,
)

role_st = st.fixed_dictionaries({
    "taskNumber": st.integers(1, 3),
    "cpuNumber": st.integers(1, 3),
    "memoryMB": st.sampled_from([100, 400, 900]),
    "gpuNumber": st.integers(0, 2),
    # (portNumber, beginAt, whether the spec takes the label of a default port: http first, ssh second)
    "ports": st.lists(st.tuples(st.integers(1, 3), st.sampled_from([0, 0, 20003, 20006]), st.booleans()),
                      max_size=2),
})

job_st = st.tuples(st.lists(role_st, min_size=1, max_size=2), st.sampled_from(["", *TYPES]))


def cluster(specs: list[dict[str, Any]]) -> list[NodeRecord]:
    return [make_node(f"n{i}", cpus=s["cpus"], memory_mb=s["memory_mb"], gpus=s["gpus"],
                      port_range=(20000, 20000 + s["ports"] - 1), lost=s["lost"]) for i, s in enumerate(specs)]


def job(spec: tuple[list[dict[str, Any]], str], name: str) -> JobConfig:
    roles, gpu_type = spec
    fixed_at = 20003
    out = []
    for r, role in enumerate(roles):
        ports = []
        for j, (count, begin, default_label) in enumerate(role["ports"]):
            # Fixed spans of one role must not overlap (validation refuses that): move them apart.
            start = fixed_at if begin else 0
            fixed_at += 4 if begin else 0
            ports.append(port_dict(("http", "ssh")[j] if default_label else f"p{j}", start, count))
        out.append(role_dict(f"r{r}", taskNumber=role["taskNumber"], cpuNumber=role["cpuNumber"],
                             memoryMB=role["memoryMB"], gpuNumber=role["gpuNumber"], portList=ports))
    return make_config(*out, jobName=name, gpuType=gpu_type)


def check_plan(snap: ClusterSnapshot, plan: Plan, config: JobConfig) -> None:
    """A plan names live nodes, GPUs of the asked type that exist, and the ports its specs ask for (the
    default http and ssh included)."""
    nodes = {n.id: n for n in snap.nodes}
    assert len(plan.tasks) == config.total_tasks
    for t in plan.tasks:
        node, role = nodes[t.node_id], config.role(t.role)
        kinds = {g.index: g.type for g in node.gpus}
        assert len(t.gpus) == role.gpu_number and set(t.gpus) <= set(kinds)
        assert not config.gpu_type or all(kinds[g] == config.gpu_type for g in t.gpus)
        specs = port_specs(role)
        assert list(t.ports) == [label for label, _, _ in specs]
        for label, begin, count in specs:
            got = t.ports[label]
            assert len(got) == count
            if begin:
                assert got == tuple(range(begin, begin + count))
            else:
                assert all(node.port_range[0] <= p <= node.port_range[1] for p in got)


def check_usage(snap: ClusterSnapshot, plans: list[tuple[Plan, JobConfig]]) -> None:
    """Tallied from the plans alone: within every node's capacity, no GPU or port given twice, and
    exactly what the snapshot says is used."""
    tally: dict[str, list[Any]] = defaultdict(lambda: [0, 0, [], []])
    for plan, config in plans:
        for t in plan.tasks:
            role, row = config.role(t.role), tally[t.node_id]
            row[0] += role.cpu_number
            row[1] += role.memory_mb
            row[2].extend(t.gpus)
            row[3].extend(p for ps in t.ports.values() for p in ps)
    for node in snap.nodes:
        cpus, memory, gpus, ports = tally[node.id]
        assert cpus <= node.cpus and memory <= node.memory_mb
        assert len(gpus) == len(set(gpus)) and len(ports) == len(set(ports))
        u = snap.usage[node.id]
        assert (u.cpus, u.memory_mb, u.gpus, u.ports) == (cpus, memory, set(gpus), set(ports))


@settings(max_examples=150, deadline=None, database=None)
@given(nodes=nodes_st, history=st.lists(job_st, max_size=6), last=job_st,
       seed=st.integers(0, 2**32), strategy=st.sampled_from([None, "pack", "spread"]))
def test_indexes_stay_true_and_plans_never_double_book(
    nodes: list[dict[str, Any]], history: list[tuple[list[dict[str, Any]], str]],
    last: tuple[list[dict[str, Any]], str], seed: int, strategy: Any,
) -> None:
    snap = ClusterSnapshot.build(cluster(nodes), [])
    plans: list[tuple[Plan, JobConfig]] = []
    for n, spec in enumerate([*history, last]):
        config = job(spec, f"j{n}")
        before = fingerprint(snap)
        result = place(snap, config, seed=seed, strategy=strategy)
        assert fingerprint(snap) == before, "place gives back everything it tried"
        if isinstance(result, Unplaceable):
            assert sum(result.counts.values()) == len(snap.nodes), "every live node is counted once"
            continue
        check_plan(snap, result, config)
        snap.hold(result, config)
        plans.append((result, config))
        check_usage(snap, plans)
        assert fingerprint(snap) == fingerprint(rebuilt(snap)), "indexes moved exactly as a rebuild says"


@settings(max_examples=200, deadline=None, database=None)
@given(nodes=nodes_st, history=st.lists(job_st, max_size=5), role=role_st,
       gpu_type=st.sampled_from(["", *TYPES]), seed=st.integers(0, 2**32),
       strategy=st.sampled_from(["pack", "spread"]))
def test_one_task_is_placed_exactly_when_a_scan_finds_a_node_and_counts_match_the_scan(
    nodes: list[dict[str, Any]], history: list[tuple[list[dict[str, Any]], str]], role: dict[str, Any],
    gpu_type: str, seed: int, strategy: Any,
) -> None:
    snap = ClusterSnapshot.build(cluster(nodes), [])
    for n, spec in enumerate(history):  # a cluster in some random state of use
        config = job(spec, f"j{n}")
        result = place(snap, config, seed=seed)
        if isinstance(result, Plan):
            snap.hold(result, config)
    config = job(([{**role, "taskNumber": 1}], gpu_type), "last")
    task_role = config.task_roles[0]
    scan = {node.id: naive_reason(node, snap.usage[node.id], task_role, gpu_type) for node in snap.nodes}
    result = place(snap, config, seed=seed, strategy=strategy)
    if any(reason is None for reason in scan.values()):
        assert isinstance(result, Plan), result
        assert scan[result.tasks[0].node_id] is None, "the chosen node is one the scan accepts"
        check_plan(snap, result, config)
    else:
        assert isinstance(result, Unplaceable)
        assert result.counts == dict(Counter(r for r in scan.values() if r is not None))


# --- the indexes, by example ------------------------------------------------------------------


def test_the_why_not_counts_of_a_large_cluster_match_the_scan() -> None:
    """Most nodes are ruled out by the GPU index and never visited, yet each is counted under the first
    check it fails: CPU before memory before GPUs."""
    nodes = [*make_nodes(50, prefix="full", cpus=8, gpus=["V100"] * 4),
             *make_nodes(7, prefix="cpu", cpus=1, gpus=["V100"] * 8),
             *make_nodes(5, prefix="mem", memory_mb=512, gpus=["K80"]),
             *make_nodes(3, prefix="k80", gpus=["K80"] * 8)]
    snap = ClusterSnapshot.build(nodes, [])
    hog = make_config(role_dict(taskNumber=50, cpuNumber=2, gpuNumber=3), gpuType="V100", jobName="hog")
    plan = place(snap, hog, strategy="spread")
    assert isinstance(plan, Plan) and {t.node_id for t in plan.tasks} == {f"full{i}" for i in range(50)}
    snap.hold(plan, hog)
    config = make_config(role_dict(cpuNumber=2, memoryMB=1024, gpuNumber=2), gpuType="V100")
    result = place(snap, config)
    assert isinstance(result, Unplaceable)
    assert result.counts == {"lack 2 free CPUs": 7, "lack 1024 MB of free memory": 5,
                             "lack 2 free GPUs of type V100": 53}
    scan = Counter(naive_reason(n, snap.usage[n.id], config.task_roles[0], "V100") for n in snap.nodes)
    assert result.counts == dict(scan)


def test_random_ports_skip_a_run_of_taken_ports_at_the_start_of_the_range() -> None:
    snap = ClusterSnapshot.build([make_node("n1", cpus=64, port_range=(20000, 20999))], [])
    config = make_config(role_dict(taskNumber=40, portList=[port_dict("a", 0, 3)]))
    plan = place(snap, config)
    assert isinstance(plan, Plan)
    snap.hold(plan, config)
    assert snap.states[0].ports_in_range == 200, "3 'a' ports and the default http and ssh, 40 times"
    assert snap.states[0].port_floor == 20200
    nxt = place(snap, make_config(role_dict(portList=[port_dict("b", 0, 2), port_dict("c", 20201, 1)])))
    assert isinstance(nxt, Plan)
    assert nxt.tasks[0].ports == {"b": (20200, 20202), "c": (20201,), "http": (20203,), "ssh": (20204,)}


def test_ports_held_outside_the_range_do_not_count_against_it() -> None:
    node = make_node("n1", port_range=(20000, 20003))
    snap = ClusterSnapshot.build([node], [])
    # http and ssh declared as fixed ports too, so that none of this job's ports falls in the range.
    fixed = make_config(role_dict(portList=[port_dict("f", 8080, 5), port_dict("http", 8085), port_dict("ssh", 8086)]),
                        jobName="fixed")
    plan = place(snap, fixed)
    assert isinstance(plan, Plan)
    snap.hold(plan, fixed)
    assert snap.usage["n1"].ports == set(range(8080, 8087))
    assert snap.states[0].ports_in_range == 0
    # The next task needs all 4 ports of the range (2 'r', default http and ssh) and gets them.
    nxt = place(snap, make_config(role_dict(portList=[port_dict("r", 0, 2)])))
    assert isinstance(nxt, Plan) and nxt.tasks[0].ports == {"r": (20000, 20001), "http": (20002,), "ssh": (20003,)}


def test_a_gpu_type_no_node_has_is_counted_as_lacking_gpus() -> None:
    snap = ClusterSnapshot.build(make_nodes(3, gpus=["V100"] * 8), [])
    result = place(snap, make_config(role_dict(gpuNumber=1), gpuType="A100"))
    assert isinstance(result, Unplaceable)
    assert result.counts == {"lack 1 free GPU of type A100": 3}


@pytest.mark.parametrize(
    ("random_ports", "expected"),
    # 5 ports in the range: the own fixed 20001, 'rand', and the default http and ssh. With 3 'rand'
    # ports the ssh port finds none left; counting 20001 as free it would (wrongly) seem to fit.
    [(2, {"fixed": (20001,), "rand": (20000, 20002), "http": (20003,), "ssh": (20004,)}),
     (3, "lack 1 free port in 20000-20004")],
)
def test_a_task_s_own_fixed_port_inside_the_range_is_not_free_for_its_random_ports(
    random_ports: int, expected: dict[str, tuple[int, ...]] | str,
) -> None:
    snap = ClusterSnapshot.build([make_node("n1", port_range=(20000, 20004))], [])
    config = make_config(role_dict(portList=[port_dict("fixed", 20001), port_dict("rand", 0, random_ports)]))
    result = place(snap, config)
    if isinstance(expected, str):
        assert isinstance(result, Unplaceable) and result.counts == {expected: 1}
    else:
        assert isinstance(result, Plan) and result.tasks[0].ports == expected


# --- scoring: which nodes a search sees, in which order ------------------------------------------


@pytest.mark.parametrize(
    ("strategy", "role", "expected"),
    [
        ("pack", dict(gpuNumber=2), ["g2", "g4", "g8"]),
        ("spread", dict(gpuNumber=2), ["g8", "g4", "g2"]),
        ("pack", dict(gpuNumber=5), ["g8"]),
        ("pack", dict(cpuNumber=3), ["g4", "g8", "g2", "g1", "g0"]),
        ("spread", dict(cpuNumber=3), ["g0", "g1", "g2", "g4", "g8"]),
    ],
    ids=["pack-gpus", "spread-gpus", "only-nodes-with-enough", "pack-cpus", "spread-cpus"],
)
def test_candidates_are_only_nodes_with_enough_of_the_scored_resource_best_first(
    strategy: Any, role: dict[str, Any], expected: list[str],
) -> None:
    # Free V100s 0, 1, 2, 4, 8; free CPUs 8, 6, 4, 3, 3 (so CPU-only tasks see another order).
    nodes = [make_node(f"g{n}", cpus=c, gpus=["V100"] * n) for n, c in ((0, 8), (1, 6), (2, 4), (4, 3), (8, 3))]
    snap = ClusterSnapshot.build(nodes, [])
    ask = Ask.of(make_config(role_dict(**role)).task_roles[0], "V100")
    assert [n.id for n in candidates(snap, ask, strategy, 0.0)] == expected


@pytest.mark.parametrize(("turn", "expected"), [(0.0, "abcd"), (0.25, "bcda"), (0.6, "cdab"), (0.99, "dabc")])
def test_equal_nodes_come_in_a_rotation_that_starts_at_the_seeded_turn(turn: float, expected: str) -> None:
    snap = ClusterSnapshot.build([make_node(name, gpus=["V100"] * 2) for name in "abcd"], [])
    ask = Ask.of(make_config(role_dict(gpuNumber=1)).task_roles[0], "")
    assert "".join(n.id for n in candidates(snap, ask, "pack", turn)) == expected
