"""The environment's size at submit: the worst case from the config alone, and Linux's limits."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shared.admission.envsize import (
    CONTAINER_NAME_MAX,
    ENV_BUDGET,
    MAX_ARG_STRLEN,
    POINTER,
    WORST_GPU,
    WORST_IP,
    WORST_PORT,
    digits_below,
    env_size_problems,
    estimate,
    string_bytes,
    worst_app_id,
)
from shared.jobconfig.model import JobConfig
from shared.scheduling.placement import Plan, TaskPlacement
from shared.tasks.envvars import build_task_env, resolve_paths
from shared.tasks.launchspec import container_name
from tests.unit.factories import make_config, make_plan, port_dict, role_dict

pytestmark = pytest.mark.unit

FS = "file:///var/paiq/fs"


def with_tasks(config: JobConfig, *counts: int) -> JobConfig:
    """``config`` with its roles of ``counts`` tasks, past what validation lets a role have (5,000, the
    most tasks of a job): the environment's rules stand behind that bound and are tested beyond it."""
    roles = tuple(r.model_copy(update={"task_number": n}) for r, n in zip(config.task_roles, counts, strict=True))
    return config.model_copy(update={"task_roles": roles})


def problems(config: JobConfig, user: str = "alice") -> list[str]:
    return [str(p) for p in env_size_problems(config, user=user, paths=resolve_paths(config, user, FS))]


def worst_plan(config: JobConfig) -> Plan:
    """A placement as large as the estimate assumes: 15-character IPs, 5-digit ports, 2-digit GPUs."""
    return make_plan(*(
        TaskPlacement(role=r.name, index=i, node_id="n", ip=WORST_IP, gpus=(WORST_GPU,) * r.gpu_number,
                      ports={p.label: (WORST_PORT,) * p.port_number for p in r.ports})
        for r in config.task_roles for i in range(r.task_number)))


def exec_bytes(env: dict[str, str]) -> int:
    return sum(string_bytes(k, v) + POINTER for k, v in env.items())


def largest_real_env(config: JobConfig, plan: Plan, user: str = "alice") -> int:
    paths = resolve_paths(config, user, FS)
    return max(exec_bytes(build_task_env(config, plan, user=user, role=r, index=r.task_number - 1, paths=paths,
                                         container_id="c" * CONTAINER_NAME_MAX, app=worst_app_id(config, user)))
               for r in config.task_roles)


@pytest.mark.parametrize(("n", "digits"), [(0, 0), (1, 1), (10, 10), (11, 12), (100, 190), (101, 193),
                                           (1000, 2890), (10000, 38890)])
def test_digits_below(n: int, digits: int) -> None:
    assert digits_below(n) == digits == sum(len(str(i)) for i in range(n))


def test_the_longest_container_name_is_the_one_assumed() -> None:
    assert len(container_name("u~" + "x" * 300, 999, "r" * 64, 9999)) == CONTAINER_NAME_MAX


TEXT = st.characters(exclude_categories=("Cs",), exclude_characters="\x00")  # what a variable can hold: no NUL


@settings(max_examples=60, deadline=None, database=None)
@given(st.lists(st.tuples(st.sampled_from(["w", "ps.server", "chief", "x~1"]), st.integers(1, 120),
                          st.integers(0, 3), st.lists(st.integers(1, 4), max_size=3)),
                min_size=1, max_size=3, unique_by=lambda r: r[0]),
       st.dictionaries(st.sampled_from(["lr", "batch", "MODE"]),
                       st.text(TEXT, max_size=30), max_size=3))
def test_the_estimate_is_the_real_size_on_a_worst_case_placement(
        roles: list[tuple[str, int, int, list[int]]], job_envs: dict[str, str]) -> None:
    config = make_config(*(role_dict(name, taskNumber=n, gpuNumber=g,
                                     portList=[port_dict(f"p{j}", 0, k) for j, k in enumerate(ports)])
                           for name, n, g, ports in roles), jobEnvs=job_envs)
    assert estimate(config, user="alice", paths=resolve_paths(config, "alice", FS)).total == \
        largest_real_env(config, worst_plan(config))


def test_the_estimate_is_exact_across_index_widths() -> None:
    config = make_config(role_dict("worker", taskNumber=1001, gpuNumber=8, portList=[port_dict("http", 0, 2)]),
                         role_dict("ps", taskNumber=11, portList=[port_dict("http"), port_dict("ssh")]))
    assert estimate(config, user="alice", paths=resolve_paths(config, "alice", FS)).total == \
        largest_real_env(config, worst_plan(config))


def test_a_job_of_thousands_fits() -> None:
    assert problems(make_config(role_dict("worker", taskNumber=4000, portList=[port_dict("http")]))) == []


HOST_LIST_REFUSAL = "taskRoles[0].taskNumber: variable PAI_TASK_ROLE_worker_HOST_LIST would be up to "


# A host list holds each task's ip and http port, whatever else the role declares. (Every task's ports
# under their names pass paiq's whole budget first, at about 4,400 tasks: both refusals then come.)
@pytest.mark.parametrize("ports", [[], [port_dict("http", 0, 3), port_dict("tb")]])
def test_a_role_whose_host_list_passes_max_arg_strlen_is_refused(ports: list[dict[str, object]]) -> None:
    fits = 5956
    config = make_config(role_dict("worker", portList=ports))
    assert not [p for p in problems(with_tasks(config, fits)) if p.startswith(HOST_LIST_REFUSAL)]
    [refusal] = [p for p in problems(with_tasks(config, fits + 1)) if p.startswith(HOST_LIST_REFUSAL)]
    assert f"over {MAX_ARG_STRLEN:,} bytes (MAX_ARG_STRLEN, 128 KiB); a role of at most {fits:,} tasks fits" \
        in refusal


def test_the_host_list_limit_is_what_the_builder_makes() -> None:
    config = with_tasks(make_config(role_dict("worker", portList=[port_dict("http")])), 5956)
    env = build_task_env(config, worst_plan(config), user="alice", role=config.task_roles[0], index=0,
                         paths=resolve_paths(config, "alice", FS), container_id="c")
    size = string_bytes("PAI_TASK_ROLE_worker_HOST_LIST", env["PAI_TASK_ROLE_worker_HOST_LIST"])
    assert MAX_ARG_STRLEN - len(WORST_IP) - 7 < size <= MAX_ARG_STRLEN


def test_the_whole_environment_over_the_budget_is_refused_naming_the_roles() -> None:
    # about 235 bytes a task with its http and ssh ports: two roles of 2,245 fit, of 2,246 not
    fits = make_config(*(role_dict(r, taskNumber=2245, portList=[port_dict("http")]) for r in ("worker", "chief")))
    assert problems(fits) == []
    config = make_config(*(role_dict(r, taskNumber=2246, portList=[port_dict("http")]) for r in ("worker", "chief")))
    [refusal] = problems(config)
    assert refusal.startswith("taskRoles: one task's environment would be up to ")
    assert f"over paiq's budget of {ENV_BUDGET:,} (1 MiB; Linux refuses" in refusal
    assert "role worker (2,246 tasks)" in refusal and "role chief (2,246 tasks)" in refusal


def test_a_huge_job_env_is_refused_by_its_name() -> None:
    [refusal] = problems(make_config(jobEnvs={"BLOB": "x" * MAX_ARG_STRLEN}))
    assert refusal.startswith("jobEnvs.BLOB: variable BLOB would be up to 131,078 bytes")


def test_many_ports_are_refused_at_the_port_list() -> None:
    config = make_config(role_dict("r", portList=[port_dict(f"l{j}", 0, 1000) for j in range(50)]))
    found = problems(config)
    assert any(p.startswith("taskRoles[0].portList: variable PAI_CONTAINER_HOST_PORT_LIST would be up to ")
               for p in found), found
    assert any(p.startswith("taskRoles: one task's environment") for p in found), found


def test_a_path_substituted_past_the_limit_is_blamed_on_its_field() -> None:
    config = make_config(dataDir="$PAI_DEFAULT_FS_URI/" * 200)
    fs = "file:///" + "d" * 1000
    [refusal] = [str(p) for p in env_size_problems(config, user="alice", paths=resolve_paths(config, "alice", fs))]
    assert refusal.startswith("dataDir: variable PAI_DATA_DIR would be up to 201,814 bytes")


def test_the_estimate_is_quick_for_the_largest_job_the_model_allows() -> None:
    """100 roles of 10,000 tasks (what the model allowed before paiq's job limits, which now refuse it
    first: tests/unit/test_limits.py): the estimate judges it in O(roles)."""
    config = with_tasks(make_config(*(role_dict(f"r{i}", portList=[port_dict("http")]) for i in range(100))),
                        *[10000] * 100)
    found = problems(config)
    assert len(found) == 101  # every role's host list, and the whole


def test_the_estimate_is_a_pure_core() -> None:
    from tests.unit.test_pure_cores import test_pure_core_imports_no_io

    test_pure_core_imports_no_io("shared.admission.envsize")
