"""From the scheduler's launch commands to each container's environment: the job's shared variables
once per node, each task's own, merged by the launcher into exactly the environment of
:func:`shared.tasks.launchspec.task_specs` (which test_envvars holds to the first builder)."""

from __future__ import annotations

import json
from collections.abc import Sequence

import pytest

from services.launcher.container.spec import container_spec
from services.launcher.reconcile import launch_of, plan_of
from services.scheduler.service import _scheduled
from shared.events import CloudEvent, JobScheduled, LaunchTasks, dump_event, parse_event
from shared.scheduling.placement import Plan
from shared.settings.model import LauncherSettings
from shared.tasks.launchspec import container_name, task_specs
from tests.unit.factories import (
    make_config,
    make_job,
    make_node,
    make_plan,
    placed_job,
    placement,
    port_dict,
    role_dict,
)
from tests.unit.test_envvars import TF, TF_PLAN

pytestmark = pytest.mark.unit

FS = "hdfs://nn:9000"


def launches(events: Sequence[CloudEvent]) -> list[LaunchTasks]:
    """The launch commands as a launcher receives them (through their JSON)."""
    received = [parse_event(dump_event(e)) for e in events if isinstance(e, LaunchTasks)]
    assert all(isinstance(e, LaunchTasks) for e in received)
    return [e for e in received if isinstance(e, LaunchTasks)]


def containers_env(evt: LaunchTasks) -> dict[tuple[str, int], dict[str, str]]:
    return {(s.role, s.index): container_spec(s, name=container_name(s.job_id, s.attempt, s.role, s.index),
                                              node_id=evt.data.node_id, code_dir="", settings=LauncherSettings(),
                                              job_env=evt.data.job_env).env
            for s in evt.data.tasks}


def test_each_node_gets_the_shared_part_once_and_its_tasks_own() -> None:
    job = make_job(TF, user="alice", attempt=1)
    events = _scheduled(job, TF_PLAN, FS)
    assert isinstance(events[0], JobScheduled)
    sent = launches(events)
    assert sorted(e.data.node_id for e in sent) == ["n1", "n2"]
    whole = {(s.role, s.index): s.env for s in task_specs(job, TF_PLAN, FS)}
    seen = {}
    for evt in sent:
        assert evt.data.job_env["PAI_TASK_ROLE_worker_HOST_LIST"] == "10.0.0.1:20002,10.0.0.2:20012"
        assert all("PAI_TASK_ROLE_worker_HOST_LIST" not in s.env for s in evt.data.tasks)
        seen.update(containers_env(evt))
    assert seen == whole


def test_a_launch_of_an_older_scheduler_without_job_env_still_runs_the_whole_environment() -> None:
    job = make_job(TF, user="alice")
    [evt] = [e for e in launches(_scheduled(job, TF_PLAN, FS)) if e.data.node_id == "n2"]
    body = json.loads(dump_event(evt))
    del body["data"]["job_env"]
    whole = {(s.role, s.index): s for s in task_specs(job, TF_PLAN, FS)}
    body["data"]["tasks"] = [whole[(t["role"], t["index"])].model_dump(mode="json") for t in body["data"]["tasks"]]
    old = parse_event(json.dumps(body))
    assert isinstance(old, LaunchTasks) and old.data.job_env == {}
    assert containers_env(old) == {k: whole[k].env for k in containers_env(old)}


def test_the_launchers_relaunch_rebuilds_what_the_scheduler_sent() -> None:
    job = placed_job(TF, TF_PLAN, user="alice")
    plan = plan_of(job)
    assert isinstance(plan, Plan)
    launch = launch_of(job, FS)
    assert launch is not None
    sent = {(s.role, s.index): (evt.data.job_env, s) for evt in launches(_scheduled(job, plan, FS))
            for s in evt.data.tasks}
    for (role, index), (job_env, spec) in sent.items():
        assert launch.job_env == job_env
        assert launch.spec(role, index) == spec


def test_a_launch_message_grows_with_its_nodes_tasks_not_with_the_square_of_the_job() -> None:
    def bytes_per_task(workers: int) -> float:
        config = make_config(role_dict("worker", taskNumber=workers, portList=[port_dict("http")]))
        node = make_node("n1", ip="10.1.2.3")
        plan = make_plan(*(placement("worker", i, node, ports={"http": (20000 + i,)}) for i in range(workers)))
        [evt] = launches(_scheduled(make_job(config), plan, FS))
        return len(dump_event(evt)) / workers

    small, large = bytes_per_task(100), bytes_per_task(2000)
    # about 1 KB a task, at any size: its own spec (900 bytes) and its share of the job's variables (its
    # host and port under three names, 130 bytes); a task with its whole environment was 256 KB at 2,000
    assert large < 1500
    assert large - small < 30
