"""The in-process bus (topic routing, replies, retries, dead letters) and the CloudEvents it carries."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Literal

import pytest
from pydantic import ValidationError
from pymongo.errors import ServerSelectionTimeoutError

from shared.bus.base import MAX_HANDLER_ATTEMPTS, AfterFailure, Router, after_failure, topic_matches
from shared.bus.memory import MemoryBus
from shared.errors import BusError, StoreError
from shared.events import (
    CloudEvent,
    JobCompleted,
    JobCompletedData,
    JobScheduled,
    JobScheduledData,
    JobStopRequested,
    JobStopRequestedData,
    JobSubmitted,
    JobSubmittedData,
    JobWaiting,
    JobWaitingData,
    LaunchTasks,
    LaunchTasksData,
    NodeRegistered,
    NodeRegisteredData,
    PlacedTask,
    TaskExited,
    TaskExitedData,
    TaskStarted,
    TaskStartedData,
    dump_event,
    parse_event,
)
from shared.records import JobState, TaskSpec

pytestmark = pytest.mark.unit


def _outage() -> StoreError:
    """What the store raises while the database is away: its error, caused by PyMongo's."""
    try:
        raise StoreError("updating job j failed") from ServerSelectionTimeoutError("no servers")
    except StoreError as e:
        return e

TIMEOUT = 2.0


async def eventually(condition: Callable[[], bool], what: str) -> None:
    """Poll ``condition`` until it holds; fail after ``TIMEOUT`` seconds."""
    try:
        async with asyncio.timeout(TIMEOUT):
            # The handlers under test append to plain lists; there is no event to wait on.
            while not condition():  # noqa: ASYNC110
                await asyncio.sleep(0.001)
    except TimeoutError:
        raise AssertionError(f"timed out after {TIMEOUT}s waiting for {what}") from None


@pytest.fixture
async def bus() -> AsyncIterator[MemoryBus]:
    b = MemoryBus()
    yield b
    await b.close()


def submitted(job_id: str = "alice~j1") -> JobSubmitted:
    return JobSubmitted(subject=job_id, data=JobSubmittedData(job_id=job_id, user="alice", virtual_cluster="default"))


def waiting(job_id: str = "alice~j1", reason: str = "no fit") -> JobWaiting:
    return JobWaiting(subject=job_id, data=JobWaitingData(job_id=job_id, reason=reason))


def launch(node_id: str, job_id: str = "alice~j1") -> LaunchTasks:
    spec = TaskSpec(job_id=job_id, attempt=0, user="alice", virtual_cluster="default", role="main", index=0,
                    image="busybox", command="true", env={"PAI_JOB_NAME": "j1"}, cpus=1, memory_mb=100,
                    shm_mb=64, gpus=(1,), ports={"ssh": (20000, 20001)})
    return LaunchTasks(subject=job_id, data=LaunchTasksData(job_id=job_id, attempt=0, node_id=node_id,
                                                            tasks=(spec,)))


class Recorder:
    """A handler that records what it got and answers with ``replies``."""

    def __init__(self, replies: Sequence[CloudEvent] = (), fail_times: int = 0) -> None:
        self.got: list[CloudEvent] = []
        self.calls = 0
        self._replies = replies
        self._fail_times = fail_times

    async def __call__(self, event: CloudEvent) -> Sequence[CloudEvent]:
        self.calls += 1
        if self.calls <= self._fail_times:
            raise RuntimeError(f"failure {self.calls}")
        self.got.append(event)
        return self._replies


def router(*pairs: tuple[type[CloudEvent], Recorder]) -> Router:
    r = Router()
    for event_type, handler in pairs:
        r.on(event_type, handler)
    return r


# --- topic matching -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pattern", "key", "matches"),
    [
        ("job.submitted", "job.submitted", True),
        ("job.submitted", "job.waiting", False),
        ("job.*", "job.submitted", True),
        ("job.*", "job", False),
        ("job.*", "job.a.b", False),
        ("*", "job", True),
        ("*", "job.submitted", False),
        ("*.submitted", "job.submitted", True),
        ("node.*.launch", "node.n1.launch", True),
        ("node.*.launch", "node.n1.x.launch", False),
        ("node.*.launch", "node.launch", False),
        ("node.n1.#", "node.n1.launch", True),
        ("node.n1.#", "node.n1", True),
        ("node.n1.#", "node.n2.launch", False),
        ("node.#.launch", "node.launch", True),
        ("node.#.launch", "node.a.b.launch", True),
        ("node.#.launch", "node.a.b.stop", False),
        ("#", "job.submitted", True),
        ("#", "x", True),
        ("#.launch", "node.n1.launch", True),
        ("#.launch", "node.n1.stop", False),
        ("job.#.#", "job", True),
        ("*.*", "job.submitted", True),
        ("*.*", "job", False),
        ("task.#", "job.task", False),
        ("job.sub", "job.submitted", False),
    ],
)
def test_topic_matches(pattern: str, key: str, matches: bool) -> None:
    assert topic_matches(pattern, key) is matches


# --- delivery -------------------------------------------------------------------------------------


async def test_delivers_by_binding(bus: MemoryBus) -> None:
    scheduler, n1, n2 = Recorder(), Recorder(), Recorder()
    await bus.subscribe("scheduler", ["job.submitted"], router((JobSubmitted, scheduler)))
    await bus.subscribe("launcher.n1", ["node.n1.*"], router((LaunchTasks, n1)))
    await bus.subscribe("launcher.n2", ["node.n2.*"], router((LaunchTasks, n2)))
    evt, cmd = submitted(), launch("n1")
    await bus.publish([evt, cmd])
    await eventually(lambda: scheduler.got == [evt] and n1.got == [cmd], "both deliveries")
    # A later message for n2 is handled after anything queued for it before, so n2 got nothing else.
    marker = launch("n2", job_id="bob~marker")
    await bus.publish([marker])
    await eventually(lambda: len(n2.got) == 1, "the marker")
    assert n2.got == [marker]
    assert scheduler.got == [evt] and n1.got == [cmd]


async def test_one_event_reaches_every_bound_queue_once(bus: MemoryBus) -> None:
    a, b = Recorder(), Recorder()
    await bus.subscribe("a", ["job.*", "job.submitted", "#"], router((JobSubmitted, a)))
    await bus.subscribe("b", ["job.#"], router((JobSubmitted, b)))
    evt = submitted()
    await bus.publish([evt])
    await eventually(lambda: len(a.got) == 1 and len(b.got) == 1, "both queues")
    assert a.got == [evt] and b.got == [evt]
    assert a.got[0] is not evt, "messages travel as bytes, never shared objects"


async def test_handler_replies_are_published_to_other_queues(bus: MemoryBus) -> None:
    reply = waiting(reason="task main[0] fits on no node: 1 node lack 1 free GPU")
    scheduler, api = Recorder(replies=[reply]), Recorder()
    await bus.subscribe("scheduler", ["job.submitted"], router((JobSubmitted, scheduler)))
    await bus.subscribe("api", ["job.waiting"], router((JobWaiting, api)))
    await bus.publish([submitted()])
    await eventually(lambda: len(api.got) == 1, "the reply")
    assert api.got == [reply]
    assert bus.dead_letters == []


async def test_a_handler_that_fails_then_succeeds_is_retried(bus: MemoryBus) -> None:
    flaky, downstream = Recorder(replies=[waiting()], fail_times=MAX_HANDLER_ATTEMPTS - 1), Recorder()
    await bus.subscribe("flaky", ["job.submitted"], router((JobSubmitted, flaky)))
    await bus.subscribe("down", ["job.waiting"], router((JobWaiting, downstream)))
    evt = submitted()
    await bus.publish([evt])
    await eventually(lambda: len(downstream.got) == 1, "the reply after retries")
    assert flaky.calls == MAX_HANDLER_ATTEMPTS
    assert flaky.got == [evt]
    assert bus.dead_letters == []


async def test_a_handler_that_always_fails_ends_in_dead_letters(bus: MemoryBus) -> None:
    broken = Recorder(fail_times=10**6)
    await bus.subscribe("broken", ["job.submitted"], router((JobSubmitted, broken)))
    evt = submitted()
    await bus.publish([evt])
    await eventually(lambda: len(bus.dead_letters) == 1, "the dead letter")
    assert broken.calls == MAX_HANDLER_ATTEMPTS
    assert parse_event(bus.dead_letters[0]) == evt


async def test_an_event_without_handler_is_dead_lettered(bus: MemoryBus) -> None:
    only_submitted = Recorder()
    await bus.subscribe("q", ["job.*"], router((JobSubmitted, only_submitted)))
    await bus.publish([waiting()])
    await eventually(lambda: len(bus.dead_letters) == 1, "the unrouted message in dead letters")
    assert only_submitted.calls == 0


class Bogus(CloudEvent):
    """Looks like an event to the publisher but is no member of the union: invalid on arrival."""

    type: Literal["job.bogus"] = "job.bogus"


async def test_an_invalid_message_is_dead_lettered_without_calling_a_handler(bus: MemoryBus) -> None:
    seen = Recorder()
    await bus.subscribe("q", ["job.#"], router((JobSubmitted, seen)))
    bogus = Bogus(subject="x")
    await bus.publish([bogus, submitted()])
    await eventually(lambda: len(bus.dead_letters) == 1 and len(seen.got) == 1, "one dead letter, one delivery")
    assert bus.dead_letters == [dump_event(bogus)]
    assert seen.calls == 1


async def test_publish_with_no_bound_queue_drops_the_event(bus: MemoryBus) -> None:
    seen = Recorder()
    await bus.subscribe("q", ["node.#"], router((LaunchTasks, seen)))
    await bus.publish([submitted()])
    marker = launch("n1")
    await bus.publish([marker])
    await eventually(lambda: len(seen.got) == 1, "the marker")
    assert seen.got == [marker] and bus.dead_letters == []


# --- events -----------------------------------------------------------------------------------------

EVENTS: list[CloudEvent] = [
    submitted(),
    JobScheduled(subject="alice~j1", data=JobScheduledData(job_id="alice~j1", attempt=1, tasks=(
        PlacedTask(role="w", index=0, node_id="n1", ip="10.0.0.1", gpus=(0, 1), ports={"ssh": (20000,)}),))),
    waiting(),
    JobCompleted(subject="alice~j1", data=JobCompletedData(job_id="alice~j1", attempt=0, state=JobState.FAILED,
                                                           exit_code=137, reason="killed", trigger_role="w",
                                                           trigger_index=0)),
    JobStopRequested(subject="alice~j1", data=JobStopRequestedData(job_id="alice~j1", by="admin")),
    launch("n7"),
    TaskStarted(subject="alice~j1", data=TaskStartedData(job_id="alice~j1", attempt=0, role="w", index=0,
                                                         node_id="n1", container_id="c1")),
    TaskExited(subject="alice~j1", data=TaskExitedData(job_id="alice~j1", attempt=0, role="w", index=0,
                                                       node_id="n1", exit_code=0)),
    NodeRegistered(data=NodeRegisteredData(node_id="n1")),
]


@pytest.mark.parametrize("event", EVENTS, ids=[type(e).__name__ for e in EVENTS])
def test_event_round_trip(event: CloudEvent) -> None:
    parsed = parse_event(dump_event(event))
    assert type(parsed) is type(event)
    assert parsed == event


@pytest.mark.parametrize("event", EVENTS, ids=[type(e).__name__ for e in EVENTS])
def test_event_is_a_cloudevents_envelope(event: CloudEvent) -> None:
    doc = json.loads(dump_event(event))
    # CloudEvents 1.0: subject, when present, is not empty; an event about no job goes without one
    envelope = {"specversion", "id", "source", "type", "time", "datacontenttype", "data"}
    assert set(doc) == envelope | ({"subject"} if event.subject else set())
    assert doc.get("subject", None) != ""
    assert doc["specversion"] == "1.0" and doc["datacontenttype"] == "application/json"
    assert doc["type"] == event.type  # type: ignore[attr-defined]


def test_routing_keys() -> None:
    assert launch("n7").routing_key == "node.n7.launch"
    assert launch("n7").type == "node.launch"
    assert submitted().routing_key == "job.submitted"
    assert waiting().routing_key == "job.waiting"


def test_events_get_distinct_ids() -> None:
    assert submitted().id != submitted().id


@pytest.mark.parametrize(
    "body",
    [b"", b"{}", b"not json", b'{"type": "job.unknown", "data": {}}',
     json.dumps({**json.loads(dump_event(submitted())), "extra": 1}).encode(),
     json.dumps({**json.loads(dump_event(submitted())), "data": {"job_id": "x"}}).encode()],
    ids=["empty", "empty-object", "not-json", "unknown-type", "extra-field", "missing-data-fields"],
)
def test_parse_event_refuses_what_is_not_an_event(body: bytes) -> None:
    with pytest.raises(ValidationError):
        parse_event(body)


@pytest.mark.parametrize(("error", "attempt", "action"), [
    (RuntimeError("bug"), 1, AfterFailure.REQUEUE),
    (RuntimeError("bug"), MAX_HANDLER_ATTEMPTS - 1, AfterFailure.REQUEUE),
    (RuntimeError("bug"), MAX_HANDLER_ATTEMPTS, AfterFailure.DEAD_LETTER),
    (RuntimeError("bug"), MAX_HANDLER_ATTEMPTS + 3, AfterFailure.DEAD_LETTER),  # counted by a broker past ours
    (StoreError("x") , 1, AfterFailure.REQUEUE),  # the store failing for another reason than an outage
    (_outage(), 1, AfterFailure.HOLD),
    (_outage(), MAX_HANDLER_ATTEMPTS, AfterFailure.HOLD),  # an outage never uses up a message's attempts
    (_outage(), MAX_HANDLER_ATTEMPTS + 10, AfterFailure.HOLD),
    (BusError("publishing job.completed was not confirmed"), MAX_HANDLER_ATTEMPTS, AfterFailure.HOLD),
])
def test_what_a_bus_does_after_a_handler_failed(error: Exception, attempt: int, action: AfterFailure) -> None:
    assert after_failure(error, attempt) is action
