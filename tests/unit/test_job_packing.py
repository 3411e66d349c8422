"""A big job's document: its configs and tasks packed (shared/packing.py), read back exactly, never larger
than plain, the queue's priority still in plain sight; documents written plain (older ones) still read."""

from __future__ import annotations

import random
import string
from typing import Any

import bson
import pytest

from shared.admission.validation import Accepted, validate_job_config
from shared.jobconfig.priority import FIELD_PATH, class_of_extras, priority_class_of
from shared.packing import PACK_MIN_BYTES, PackingError, pack, unpack
from shared.records import (
    PACKED_CONFIG,
    PACKED_TASKS,
    AttemptRecord,
    JobRecord,
    TaskRecord,
    TaskState,
    initial_tasks,
    tasks_update,
)
from tests.unit.factories import config_dict, role_dict

pytestmark = pytest.mark.unit

RNG = random.Random(24)


def _random_text(n: int) -> str:
    return "".join(RNG.choices(string.ascii_letters + string.digits + string.punctuation, k=n))


def job_of(tasks: int = 1, extras: dict[str, Any] | None = None, **task_changes: Any) -> JobRecord:
    result = validate_job_config(config_dict(role_dict("main", taskNumber=tasks), extras=extras or {}))
    assert isinstance(result, Accepted), result
    records = tuple(t.model_copy(update=task_changes) for t in initial_tasks(result.config))
    return JobRecord(id="u~j~00000000", user="u", name="j", virtual_cluster="default", config=result.config,
                     raw_config=result.raw, created_ms=1, tasks=records)


def _with_random_stderr(job: JobRecord, chars: int) -> JobRecord:
    """Each task a different tail (a task's share of the job's stderr budget at 600 tasks: ~870 characters)."""
    return job.model_copy(update={"tasks": tuple(t.model_copy(update={"diagnostics": _random_text(chars)})
                                                 for t in job.tasks)})


ENDED = {"state": TaskState.FAILED, "node_id": "node-7", "ip": "10.0.0.7", "ports": {"ssh": (20001,)},
         "container_id": "c" * 64, "exit_code": 3, "reason": "command exited with code 3", "started_ms": 5,
         "completed_ms": 9}
JOBS = {
    # name: (job, packed config, packed tasks)
    "one task": (job_of(), False, False),
    "60 tasks, under the size": (job_of(60), False, False),
    "4,490 tasks": (job_of(4490), False, True),
    "4,490 ended tasks with stderr": (job_of(4490, diagnostics="Traceback: boom\n" * 12, **ENDED), False, True),
    "1 MB of repeated extras": (job_of(1, {"v": ["x" * 100] * 9500}), True, False),
    "9,400 empty lists, prod": (job_of(4490, {"v": [[]] * 9400, "hivedScheduler": {"jobPriorityClass": "prod"}}),
                                True, True),
    # high-entropy text: zlib saves a quarter, so its blob is weighed against the part's BSON size
    "1 MB of random extras": (job_of(1, {"v": [_random_text(100) for _ in range(9500)]}), True, False),
    "ended tasks with random stderr": (_with_random_stderr(job_of(600, **ENDED), 870), False, True),
}


@pytest.mark.parametrize("name", list(JOBS))
def test_a_job_reads_back_exactly_packed_where_it_pays(name: str) -> None:
    job, config_packed, tasks_packed = JOBS[name]
    doc = bson.decode(bson.encode(job.to_document()))  # as the server gives it back
    assert (PACKED_CONFIG in doc, PACKED_TASKS in doc) == (config_packed, tasks_packed)
    assert ("raw_config" in doc, "tasks" in doc) == (not config_packed, not tasks_packed)
    assert JobRecord.from_document(doc) == job
    for field in ("holds", "hold_nodes", "task_count", "gpu_count", "role_count", "state", "created_ms"):
        assert field in doc, f"{field}: what queries read stays plain"


@pytest.mark.parametrize("name", list(JOBS))
def test_a_packed_document_is_never_larger_than_plain(name: str) -> None:
    job = JOBS[name][0]
    plain, packed = len(bson.encode(job.to_document(packed=False))), len(bson.encode(job.to_document()))
    assert packed <= plain
    if PACKED_TASKS in job.to_document() and "random" not in name:
        assert packed < plain / 6, "task records shrink 40-60x"


@pytest.mark.parametrize("extras", [
    {}, {"hivedScheduler": {"jobPriorityClass": "prod"}}, {"hivedScheduler": {"jobPriorityClass": "crit"}},
    {"hivedScheduler": {"jobPriorityClass": "oppo"}}, {"hivedScheduler": {"jobPriorityClass": None}},
    {"hivedScheduler": {}}, {"hivedScheduler": {"jobPriorityClass": "test", "other": "p" * 50_000}},
])
def test_the_queue_reads_the_priority_class_of_a_packed_config(extras: dict[str, Any]) -> None:
    job = job_of(1, {**extras, "pad": ["x" * 100] * 2000})
    doc = job.to_document()
    assert PACKED_CONFIG in doc
    projected = doc["config"]  # what queue_order's projection of FIELD_PATH finds: the stub alone
    assert set(projected) == {"extras"} and len(bson.encode(projected)) < 100
    assert class_of_extras(projected["extras"]) == priority_class_of(job.config)
    assert FIELD_PATH.startswith("extras.")


def test_older_plain_documents_and_a_stale_plain_copy_read_as_the_packed_part_says() -> None:
    job = JOBS["4,490 ended tasks with stderr"][0]
    assert JobRecord.from_document(job.to_document(packed=False)) == job
    running = job.model_copy(update={"tasks": tuple(t.model_copy(update={"state": TaskState.RUNNING})
                                                    for t in job.tasks)})
    mixed = {**job.to_document(packed=False), PACKED_TASKS: running.to_document()[PACKED_TASKS]}
    assert JobRecord.from_document(mixed).tasks == running.tasks


@pytest.mark.parametrize(("tasks", "packed"), [(1, False), (4490, True)])
def test_an_update_of_tasks_writes_one_form_and_unsets_the_other(tasks: int, packed: bool) -> None:
    records = initial_tasks(job_of(tasks).config)
    for given in (records, [t.model_dump(mode="json") for t in records]):
        written, unset = tasks_update(given)
        assert (set(written), set(unset)) == (({PACKED_TASKS}, {"tasks"}) if packed else ({"tasks"}, {PACKED_TASKS}))
        doc = {**job_of(tasks).to_document(packed=False), PACKED_TASKS: b"stale", **written}
        for field in unset:
            doc.pop(field)
        assert JobRecord.from_document(doc).tasks == records


def _unasked() -> int:
    raise AssertionError("the BSON size is asked only when the blob is over a sixth of the text")


def test_small_parts_and_parts_larger_packed_stay_plain_and_unreadable_blobs_are_refused() -> None:
    assert pack(b"x" * (PACK_MIN_BYTES - 1), _unasked) is None
    blob = pack(b"[" + b"1," * PACK_MIN_BYTES + b"1]", _unasked)
    assert blob is not None and unpack(blob).startswith(b"[1,1")
    noise = RNG.randbytes(PACK_MIN_BYTES * 4).hex().encode()  # zlib shrinks hex digits to about half
    assert pack(noise, lambda: len(noise)) is not None
    assert pack(noise, lambda: len(noise) // 3) is None, "never larger than the part as BSON"
    with pytest.raises(PackingError, match="unknown format"):
        unpack(b"\x02" + blob[1:])
    with pytest.raises(PackingError, match="damaged"):
        unpack(blob[:20])


def test_a_task_record_is_what_it_was() -> None:
    task = TaskRecord(role="r", index=3, gpus=(0, 1), ports={"ssh": (20000, 20001)}, kept_until_ms=2**42,
                      diagnostics="\x00\x1b[31mé\u2028\n\"\\", **{k: v for k, v in ENDED.items() if k != "ports"})
    job = job_of(1).model_copy(update={"tasks": (task,) * 200})
    doc = bson.decode(bson.encode(job.to_document()))
    assert PACKED_TASKS in doc and JobRecord.from_document(doc).tasks == (task,) * 200


@pytest.mark.parametrize("name", ["one task", "4,490 ended tasks with stderr", "ended tasks with random stderr"])
def test_an_archived_attempt_reads_back_exactly_as_written_now_or_before(name: str) -> None:
    job = JOBS[name][0]
    attempt = AttemptRecord(attempt=2, tasks=job.tasks, launched_ms=5, completed_ms=9, exit_code=3,
                            exit_phrase="UserFailure", trigger_role="main", trigger_index=0)
    doc = bson.decode(bson.encode(attempt.to_document(job.id)))
    assert (doc["_id"], doc["job_id"], doc["attempt"]) == (f"{job.id}/2", job.id, 2)
    assert (PACKED_TASKS in doc) == JOBS[name][2]
    assert AttemptRecord.from_document(doc) == attempt
    before = {"_id": f"{job.id}/2", "job_id": job.id, **attempt.model_dump(mode="json")}  # as written before
    assert AttemptRecord.from_document(before) == attempt


def test_what_the_config_keeps_as_submitted_is_stored_once_and_read_back_with_its_types() -> None:
    job = JOBS["1 MB of random extras"][0]
    doc = job.to_document()
    assert len(doc[PACKED_CONFIG]) < len(bson.encode({"extras": job.raw_config["extras"]})), "extras once, not twice"
    # A field equal in Python but not as JSON (1 == 1.0 == True) is kept twice, each as it was.
    pad = [_random_text(100) for _ in range(400)]
    raw = {**job.raw_config, "extras": {"a": 1, "b": [1.0, None], "pad": pad}}
    config = job.config.model_copy(update={"extras": {"a": True, "b": [1, None], "pad": pad}})
    typed = job.model_copy(update={"config": config, "raw_config": raw})
    again = JobRecord.from_document(bson.decode(bson.encode(typed.to_document())))
    assert PACKED_CONFIG in typed.to_document() and again == typed
    assert again.config.extras["a"] is True and again.raw_config["extras"]["a"] == 1
    assert type(again.raw_config["extras"]["a"]) is int and type(again.config.extras["b"][0]) is int
