"""The journal and its relay against the real MongoDB-wire server (shared.db.journal, shared.runtime.relay):
events stored with their change or not at all, numbered without gaps in each job's order, published at
least once with the same ids whoever leads, read back by number and by time, and removed past retention."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence

import pytest

from shared.bus.base import Router
from shared.bus.memory import MemoryBus
from shared.db.store import Store, open_store
from shared.events import CloudEvent, JobCompleted, JobCompletedData, JobSubmitted, JobSubmittedData, parse_event
from shared.records import JobState
from shared.runtime.relay import Relay
from tests.infra import unique
from tests.unit.factories import make_config, make_job

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


@pytest.fixture
async def store(mongo_uri: str) -> AsyncIterator[Store]:
    async with open_store(mongo_uri, unique("journal_")) as s:
        await s.journal.ensure_indexes()
        yield s


def submitted(job_id: str) -> JobSubmitted:
    return JobSubmitted(subject=job_id, data=JobSubmittedData(job_id=job_id, user="u", virtual_cluster="default"))


def completed(job_id: str) -> JobCompleted:
    return JobCompleted(subject=job_id, data=JobCompletedData(job_id=job_id, attempt=0, state=JobState.SUCCEEDED))


class Heard:
    """A consumer of the bus that counts events by id."""

    def __init__(self) -> None:
        self.events: list[CloudEvent] = []

    async def take(self, evt: CloudEvent) -> Sequence[CloudEvent]:
        self.events.append(evt)
        return []

    async def on(self, bus: MemoryBus) -> None:
        router = Router()
        router.on(JobSubmitted, self.take)
        router.on(JobCompleted, self.take)
        await bus.subscribe(unique("heard-"), ["job.*"], router)


async def test_a_change_that_is_not_written_stores_none_of_its_events(store: Store) -> None:
    job = make_job(make_config(jobName=unique("j")), user="u")
    await store.insert_job(job)
    stale = await store.replace_job(job, job.version + 7, [completed(job.id)])  # someone changed it meanwhile
    assert stale is False
    assert await store.journal.waiting() == [], "events of a change that was not written were stored"
    assert await store.replace_job(job, job.version, [completed(job.id)]) is True
    [waiting] = await store.journal.waiting()
    assert (waiting["job"], waiting["v"], waiting["type"]) == (job.id, job.version + 1, "job.completed")


async def test_numbers_follow_each_jobs_changes_and_every_event_is_published_in_that_order(store: Store) -> None:
    bus = MemoryBus()
    heard = Heard()
    await heard.on(bus)
    jobs = [make_job(make_config(jobName=unique("j")), user="u") for _ in range(5)]
    for job in jobs:
        await store.journal.record([submitted(job.id)], version=0, session=None)
        await store.journal.record([completed(job.id)], version=1, session=None)
    relay = Relay(store, bus, retention_ms=0)
    while await relay.round():
        pass
    state = await store.journal.state()
    assert (state.last, state.published) == (10, 10)
    entries = await store.journal.read(0, 100)
    assert [e.seq for e in entries] == list(range(1, 11)), "numbered 1..10 without a gap"
    for job in jobs:
        assert [e.type for e in entries if e.job == job.id] == ["job.submitted", "job.completed"]
    await bus.drained()
    assert [e.id for e in heard.events] == [e.id for e in entries], "published once each, in the journal's order"
    assert await store.journal.number_of(entries[3].id) == 4


async def test_a_relay_killed_between_publishing_and_recording_it_is_repeated_with_the_same_ids(
        store: Store) -> None:
    """At least once: the next leader publishes what the last published without recording it, ids unchanged."""
    bus = MemoryBus()
    heard = Heard()
    await heard.on(bus)
    job = make_job(make_config(jobName=unique("j")), user="u")
    await store.journal.record([submitted(job.id), completed(job.id)], version=1, session=None)
    first = Relay(store, bus, retention_ms=0, instance="first")

    async def crash(_: int) -> None:
        raise SystemExit("killed after publishing")  # stands for the process's death

    first.store.journal.mark_published = crash  # type: ignore[method-assign]
    with pytest.raises(SystemExit):
        await first.round()
    await store.release_lease("journal", "first")  # its lease ends as a dead process's would
    store.journal.mark_published = type(store.journal).mark_published.__get__(store.journal)  # type: ignore[method-assign]
    second = Relay(store, bus, retention_ms=0, instance="second")
    while await second.round():
        pass
    await bus.drained()
    ids = [e.id for e in heard.events]
    assert len(ids) == 4 and len(set(ids)) == 2, "each event twice, with its own id both times"
    assert (await store.journal.state()).published == 2


async def test_only_the_lease_holder_numbers(store: Store) -> None:
    bus = MemoryBus()
    a, b = Relay(store, bus, retention_ms=0, instance="a"), Relay(store, bus, retention_ms=0, instance="b")
    await a.round()
    job = make_job(make_config(jobName=unique("j")), user="u")
    await store.journal.record([submitted(job.id)], version=0, session=None)
    assert await b.round() is False and not b.leading
    assert (await store.journal.state()).last == 0
    assert await a.round() is True and a.leading
    assert (await store.journal.state()).last == 1


async def test_numbers_by_time_and_retention(store: Store) -> None:
    bus = MemoryBus()
    relay = Relay(store, bus, retention_ms=0)
    for i in range(6):
        job = make_job(make_config(jobName=unique("j")), user="u")
        await store.journal.record([submitted(job.id)], version=0, session=None)
        while await relay.round():
            pass
        await store.journal.entries.update_one({"seq": i + 1}, {"$set": {"at": 1000 * (i + 1)}})
    assert await store.journal.number_at(3500) == 3, "the last numbered before 3.5 s"
    assert await store.journal.number_at(0) == 0 and await store.journal.number_at(10**9) == 6
    assert await store.journal.purge(3500) == 3
    state = await store.journal.state()
    assert state.first == 4 and [e.seq for e in await store.journal.read(0, 100)] == [4, 5, 6]


async def test_the_status_services_write_journals_the_event_it_took_in_as_published(store: Store) -> None:
    """A launcher's task event is on the bus already: journaled with the change it causes, it is numbered,
    and not published again; taken in twice (a redelivery), it is journaled once."""
    bus = MemoryBus()
    heard = Heard()
    await heard.on(bus)
    job = make_job(make_config(jobName=unique("j")), user="u")
    await store.insert_job(job)
    came = submitted(job.id)  # stands for a launcher's event the status service takes in
    assert await store.replace_job(job, job.version, [came, completed(job.id)], [True, False])
    again = job.model_copy(update={"version": job.version + 1})
    assert await store.replace_job(again, again.version, [came], [True]), "a duplicate taken in changes the job"
    relay = Relay(store, bus, retention_ms=0)
    while await relay.round():
        pass
    await bus.drained()
    entries = await store.journal.read(0, 100)
    assert [e.type for e in entries] == ["job.submitted", "job.completed"]
    assert [e.type for e in heard.events] == ["job.completed"], "what came from the bus is not published again"
    assert parse_event(entries[0].body).id == came.id
    await asyncio.sleep(0)


async def test_a_numbering_whose_commit_answer_is_lost_is_published_at_the_next_look(store: Store) -> None:
    """The relay's numbering transaction commits but its answer is lost (the connection dropped after the
    commit): the entries are numbered and nothing waits, yet the next look publishes them (the relay does not
    take itself for settled, which on an idle platform would leave them until the next entry)."""
    from pymongo.errors import AutoReconnect

    bus = MemoryBus()
    heard = Heard()
    await heard.on(bus)
    relay = Relay(store, bus, retention_ms=0)
    assert await relay.round() is False  # an idle look: all it numbered is published
    job = make_job(make_config(jobName=unique("j")), user="u")
    await store.journal.record([submitted(job.id)], version=0, session=None)
    atomically = store.atomically

    async def committed_then_lost(*args: object, **kwargs: object) -> object:
        await atomically(*args, **kwargs)  # type: ignore[arg-type]
        raise AutoReconnect("connection closed after the commit")

    store.atomically = committed_then_lost  # type: ignore[method-assign,assignment]
    with pytest.raises(AutoReconnect):
        await relay.round()
    store.atomically = atomically  # type: ignore[method-assign]
    assert await store.journal.waiting() == [] and (await store.journal.state()).last == 1
    await relay.round()
    await bus.drained()
    assert [e.id for e in heard.events] == [(await store.journal.read(0, 10))[0].id]
    assert (await store.journal.state()).published == 1


async def test_a_leader_numbers_from_what_it_wrote_and_rereads_when_another_numbered(store: Store) -> None:
    """While it leads throughout, the relay numbers from the last number it gave, without reading the journal's
    state each round. Should the journal have moved on meanwhile (another numberer whose lease overlapped:
    here written by hand), its transaction writes nothing, and the next round reads the state and numbers
    after it: no number given twice."""
    from shared.db.journal import META_ID

    bus = MemoryBus()
    relay = Relay(store, bus, retention_ms=0)
    job = make_job(make_config(jobName=unique("j")), user="u")
    await store.journal.record([submitted(job.id)], version=0, session=None)
    while await relay.round():
        pass
    reads = 0
    state = store.journal.state

    async def counted(*args: object, **kwargs: object) -> object:
        nonlocal reads
        reads += 1
        return await state(*args, **kwargs)  # type: ignore[arg-type]

    store.journal.state = counted  # type: ignore[method-assign,assignment]
    for version in range(1, 4):
        await store.journal.record([completed(job.id)] if version == 3 else [submitted(f"{job.id}-{version}")],
                                   version=version, session=None)
        assert await relay.round() is True
    assert reads == 0, "the journal's state read while the leader knew it"
    assert (await state()).last == 4
    await store.meta.update_one({"_id": META_ID}, {"$set": {"last": 9}})  # another numbered 5-9 meanwhile
    await store.journal.record([submitted(f"{job.id}-late")], version=5, session=None)
    assert await relay.round() is True
    assert (await state()).last == 9 and len(await store.journal.waiting()) == 1, "written over the other's numbers"
    while await relay.round():
        pass
    assert reads >= 1 and (await state()).last == 10
    assert [e.seq for e in await store.journal.read(0, 100)] == [1, 2, 3, 4, 10]
