"""A task is named by one value, TaskRef: every value about one task carries it, and neither events' JSON
nor stored documents changed for it."""

from __future__ import annotations

import json

import pytest

from services.launcher.engine.tasklabels import TaskLabels
from shared.db.logs import TaskRun
from shared.db.profiles import TaskProfile
from shared.events import (
    TaskExitedData,
    TaskGpuIdleData,
    TaskProgressData,
    TaskStarted,
    TaskStartedData,
    dump_event,
    parse_event,
)
from shared.records import TaskSpec, TaskSubState
from shared.taskref import TaskRef
from shared.tasks.launchspec import container_name, ref_container_name

pytestmark = pytest.mark.unit

REF = TaskRef(job_id="alice~train~0a1b2c3d", attempt=2, role="worker", index=3)


@pytest.mark.parametrize("value", [
    TaskSpec(**REF.fields(), user="alice", virtual_cluster="default", image="busybox", command="true", env={},
             cpus=1, memory_mb=512, shm_mb=64),
    TaskStartedData(**REF.fields(), node_id="n1", container_id="c1"),
    TaskExitedData(**REF.fields(), node_id="n1", exit_code=0),
    TaskProgressData(**REF.fields(), node_id="n1", sub_state=TaskSubState.PULLING),
    TaskGpuIdleData(**REF.fields(), node_id="n1", user="alice", virtual_cluster="default", gpus=(0,),
                    idle_since_ms=1, idle_seconds=600, peak_percent=1.0, below_percent=5.0),
    TaskRun(**REF.fields(), node_id="n1", phase="running"),
    TaskProfile(**REF.fields(), node_id="n1", interval_ms=10_000),
])
def test_every_value_about_a_task_is_a_task_ref_of_it(value: TaskRef) -> None:
    assert isinstance(value, TaskRef) and value.ref == REF and hash(value.ref) == hash(REF)
    assert value.id == "alice~train~0a1b2c3d/2/worker/3"


def test_a_re_run_has_an_id_and_a_container_name_of_its_own() -> None:
    again = REF.model_copy(update={"task_attempt": 2})
    assert again.id == "alice~train~0a1b2c3d/2/worker/3/2" and again.ref == again != REF
    assert ref_container_name(REF) == container_name(REF.job_id, 2, "worker", 3), "a first run's name is unchanged"
    assert ref_container_name(again) != ref_container_name(REF) and ref_container_name(again).count("-r2-") == 1
    labels = TaskLabels(job=REF.job_id, attempt=2, role="worker", index=3, task_attempt=2)
    assert TaskLabels.from_labels(labels.to_labels()) == labels and labels.ref == again
    assert TaskExitedData.model_validate({"job_id": "j", "attempt": 0, "role": "r", "index": 0, "node_id": "n",
                                          "exit_code": 1}).task_attempt == 0, "an older launcher's report: run 0"


def test_a_containers_labels_name_its_task() -> None:
    labels = TaskLabels(job=REF.job_id, attempt=2, role="worker", index=3)
    assert labels.ref == REF and TaskLabels.from_labels(labels.to_labels()) == labels
    assert "paiq.job" in labels.to_labels(), "the label older containers carry keeps its name"


def test_an_events_json_keeps_its_field_names() -> None:
    body = TaskExitedData(**REF.fields(), node_id="n1", exit_code=3, reason="exit 3").model_dump(mode="json")
    assert list(body) == ["job_id", "attempt", "role", "index", "task_attempt", "node_id", "exit_code", "reason",
                          "diagnostics", "container_id"]
    with pytest.raises(ValueError, match="extra"):
        TaskExitedData.model_validate({**body, "surplus": 1})


def test_an_event_round_trips() -> None:
    event = TaskStarted(subject=REF.job_id, data=TaskStartedData(**REF.fields(), node_id="n1", container_id="c1"))
    again = parse_event(dump_event(event))
    assert again == event and json.loads(dump_event(event))["data"]["job_id"] == REF.job_id


def test_stored_documents_read_as_before_and_are_written_alike() -> None:
    run_doc = {"_id": REF.id, **REF.fields(), "node_id": "n1", "phase": "ended", "exit_code": 0, "claimed_ms": 5}
    run = TaskRun.model_validate(run_doc)
    assert run.ref == REF and run.exit_code == 0
    profile_doc = {"_id": REF.id, **REF.fields(), "node_id": "n1", "vc": "default", "interval_ms": 10_000}
    profile = TaskProfile.from_document(profile_doc)
    assert profile.ref == REF
    written = profile.to_document()
    assert written["_id"] == REF.id and {k: written[k] for k in REF.fields()} == REF.fields()
    assert "id" not in written
