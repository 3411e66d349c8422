"""A task container's labels (services.launcher.engine.tasklabels): written and read back in one model."""

from __future__ import annotations

import pytest

from services.launcher.engine.tasklabels import TaskLabels

pytestmark = pytest.mark.unit

WRITTEN = {"paiq.job": "alice~job1", "paiq.user": "alice", "paiq.vc": "default", "paiq.role": "worker",
           "paiq.index": "1", "paiq.attempt": "2", "paiq.node": "n1", "paiq.debug": "0", "paiq.memory_mb": "512",
           "paiq.cpus": "2", "paiq.gpus": "0,3", "paiq.task_attempt": "0"}
LABELS = TaskLabels(job="alice~job1", user="alice", vc="default", role="worker", index=1, attempt=2, node="n1",
                    debug=False, memory_mb=512, cpus=2, gpus=(0, 3))


def test_labels_round_trip() -> None:
    assert LABELS.to_labels() == WRITTEN
    assert TaskLabels.from_labels(WRITTEN) == LABELS
    debug = LABELS.model_copy(update={"debug": True})
    assert debug.to_labels()["paiq.debug"] == "1"
    assert TaskLabels.from_labels(debug.to_labels()) == debug


def test_other_labels_are_ignored() -> None:
    assert TaskLabels.from_labels({**WRITTEN, "com.example": "x", "paiq.future": "y"}) == LABELS


@pytest.mark.parametrize("missing", ["paiq.user", "paiq.vc", "paiq.node", "paiq.debug", "paiq.memory_mb", "paiq.cpus",
                                     "paiq.gpus"])
def test_an_older_container_may_lack_what_is_not_its_identity(missing: str) -> None:
    found = TaskLabels.from_labels({k: v for k, v in WRITTEN.items() if k != missing})
    assert found is not None and (found.job, found.attempt, found.role, found.index) == ("alice~job1", 2, "worker", 1)


@pytest.mark.parametrize(("labels", "read"), [
    ({**WRITTEN, "paiq.debug": "yes"}, {"debug": False}),
    ({**WRITTEN, "paiq.memory_mb": ""}, {"memory_mb": 0}),
    ({**WRITTEN, "paiq.gpus": ""}, {"gpus": ()}),
    ({**WRITTEN, "paiq.gpus": "5"}, {"gpus": (5,)}),
])
def test_lenient_reading(labels: dict[str, str], read: dict[str, object]) -> None:
    found = TaskLabels.from_labels(labels)
    assert found is not None and found.model_dump(include=set(read)) == read


@pytest.mark.parametrize("labels", [
    {},
    {"com.docker.compose.project": "x"},
    {k: v for k, v in WRITTEN.items() if k != "paiq.job"},
    {k: v for k, v in WRITTEN.items() if k != "paiq.attempt"},
    {k: v for k, v in WRITTEN.items() if k != "paiq.role"},
    {k: v for k, v in WRITTEN.items() if k != "paiq.index"},
    {**WRITTEN, "paiq.attempt": "two"},
    {**WRITTEN, "paiq.index": ""},
    {**WRITTEN, "paiq.memory_mb": "lots"},
])
def test_a_container_that_is_not_a_paiq_task_reads_as_none(labels: dict[str, str]) -> None:
    assert TaskLabels.from_labels(labels) is None


def test_engine_filters_and_keys() -> None:
    assert TaskLabels.selector("node", "n1") == "paiq.node=n1"
    assert TaskLabels.selector("job") == "paiq.job"
    assert TaskLabels.is_ours("paiq.job") and not TaskLabels.is_ours("com.example.paiq")
    with pytest.raises(KeyError):
        TaskLabels.key("nod")
