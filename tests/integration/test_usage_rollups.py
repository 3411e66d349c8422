"""The usage rollups against the real MongoDB-wire server: written as jobs end through the status service's
own handler (once, however often the completion comes), used GPU-hours from the launcher's stored profiles,
kept through a user's delete and through retention, and read back by the report's filters."""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import AsyncIterator
from typing import Any

import pytest
from pymongo import AsyncMongoClient

from services.status.service import on_task_exited, remove_expired
from shared.db.profiles import ProfileWrite, TaskProfile
from shared.db.store import Store, open_store
from shared.events import TaskExited, TaskExitedData
from shared.profiling.totals import TaskTotals
from shared.records import AttemptRecord, JobRecord, JobState, SubState, TaskRecord, TaskState, now_ms
from shared.usage.days import DAY_MS, DayRange, day_of
from shared.usage.report import Asked, Asker, ReportRow, row_filters
from tests.dbcommands import CommandCounts
from tests.infra import unique
from tests.integration.statusdeps import status_deps
from tests.unit.factories import make_config, make_job, role_dict

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]

H = 3_600_000


@pytest.fixture
async def store(mongo_uri: str) -> AsyncIterator[Store]:
    async with open_store(mongo_uri, unique("usage_")) as s:
        yield s


def running(user: str, vc: str, started_ms: int, *, gpus: int = 2, name: str | None = None) -> JobRecord:
    config = make_config(role_dict("main", cpuNumber=4, gpuNumber=gpus), jobName=name or unique("j"),
                         virtualCluster=vc)
    task = TaskRecord(role="main", index=0, state=TaskState.RUNNING, node_id="n1", ip="10.0.0.1",
                      gpus=tuple(range(gpus)), container_id="c1", started_ms=started_ms)
    job = make_job(config, user=user, tasks=[task], state=JobState.RUNNING)
    return job.model_copy(update={"id": f"{user}~{config.job_name}~{unique('')[-8:]}", "launched_ms": started_ms,
                                  "sub_state": SubState.RUNNING})


def exited(job: JobRecord, code: int = 0) -> TaskExited:
    return TaskExited(subject=job.id, data=TaskExitedData(job_id=job.id, attempt=job.attempt, role="main", index=0,
                                                          node_id="n1", exit_code=code, container_id="c1"))


def around_now() -> DayRange:
    today = dt.datetime.now(dt.UTC).date()
    return DayRange(first=today - dt.timedelta(days=3), last=today + dt.timedelta(days=1))


Key = tuple[str, str, str | None]  # day, vc, user (None: the VC's total)


async def rows(store: Store, asker: Asker | None = None, asked: Asked | None = None) -> dict[Key, ReportRow]:
    filters = row_filters(asker or Asker(user="root", admin=True), asked or Asked())
    assert isinstance(filters, tuple)
    found = await store.usage.rows(around_now(), filters, by_vc=(asked or Asked()).by == "vc")
    return {(r.day, r.vc, r.user): r for r in found}


async def held(store: Store) -> dict[Key, tuple[float, int]]:
    return {k: (round(r.gpu_hours_held, 3), r.jobs) for k, r in (await rows(store)).items()}


async def test_a_job_that_ends_is_counted_once_however_often_its_completion_comes(store: Store) -> None:
    start = now_ms() - 3 * H
    job = running("alice", "default", start)
    await store.insert_job(job)
    d = status_deps(store)
    await on_task_exited(exited(job), d)
    done = await store.get_job(job.id)
    assert done is not None and done.state == JobState.SUCCEEDED and done.completed_ms is not None
    hours = 2 * (done.completed_ms - start) / H
    counted = await held(store)
    assert set(counted) == {(day, "default", "alice") for day in {day_of(start), day_of(done.completed_ms)}}
    assert sum(h for h, _ in counted.values()) == pytest.approx(hours, abs=0.001)
    assert sum(n for _, n in counted.values()) == 1

    await on_task_exited(exited(job), d)  # the completion delivered again
    await store.count_finished(done)  # the status service's pass counting it again (a crash before its mark)
    assert await store.usage.record_job(done, [], atomic=False) is False  # and without a transaction
    assert await held(store) == counted


async def test_a_jobs_end_is_counted_in_the_transaction_that_stores_it(mongo_uri: str) -> None:
    """The write that ends a job also adds it to its VC's tally, the lists' counts and the usage rollups, and
    marks it counted: one transaction, one update of the job's document (it took three transactions and three
    updates of it, each rewriting the job's every index entry)."""
    counts = CommandCounts()
    client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(mongo_uri, tz_aware=True, event_listeners=[counts])
    try:
        store = Store(client, unique("usage_"))
        await store.ensure_indexes()
        job = running("alice", "default", now_ms() - H)
        await store.insert_job(job)
        counts.sent.clear()
        await on_task_exited(exited(job), status_deps(store))
        assert counts.sent["commitTransaction"] == 1, counts.sent
        # the job, its VC's tally (missing yet: then inserted), the lists' counts and the two rollups (bulk writes)
        assert counts.sent["update"] == 5, counts.sent
        doc = await store.jobs.find_one({"_id": job.id})
        assert doc is not None and doc["state"] == "SUCCEEDED" and doc["counted"] is True and doc["usage_counted"]
        assert await store.uncounted_finished_jobs() == []
        assert (await store.tallies.by_vc())["default"]["SUCCEEDED"] == 1
        assert sum(n for _, n in (await held(store)).values()) == 1
        assert await store.count_jobs(user="alice") == 1  # the lists' counts (an ended job is no longer "uncounted")
    finally:
        await client.close()


async def test_a_jobs_end_after_a_count_cut_short_adds_nothing_twice(store: Store) -> None:
    """A count that a crash cut short (its usage added and marked, its tally moved, the job not marked counted)
    is finished by the write that ends the job, which adds only the rest."""
    job = running("bob", "default", now_ms() - H)
    await store.insert_job(job)
    ended = job.model_copy(update={"state": JobState.SUCCEEDED, "sub_state": SubState.COMPLETED,
                                   "completed_ms": now_ms()})
    assert await store.usage.record_job(ended, [], atomic=True) is True
    await store.tallies.add("default", "SUCCEEDED", job.id)
    before = await held(store)
    await on_task_exited(exited(job), status_deps(store))
    done = await must_get(store, job.id)
    assert done.state == JobState.SUCCEEDED and done.counted
    assert await held(store) == before
    assert (await store.tallies.by_vc())["default"]["SUCCEEDED"] == 1
    assert await store.count_jobs(user="bob") == 1


async def test_used_gpu_hours_come_from_the_tasks_profile(store: Store) -> None:
    start = now_ms() - 2 * H
    job = running("bob", "vision", start, gpus=1)
    await store.insert_job(job)
    sampled = 2 * 3600.0
    profile = TaskProfile(job_id=job.id, attempt=0, role="main", index=0, node_id="n1", vc="vision", cpus=4,
                          gpus=(0,), interval_ms=10_000, totals=TaskTotals(
                              samples=720, first_ms=start, last_ms=start + 2 * H, cpu_seconds=2 * sampled,
                              gpu_held_seconds=sampled, gpu_measured_seconds=sampled, gpu_used_seconds=sampled * 0.25))
    assert await store.profiles.save([ProfileWrite(profile=profile, new=True)]) == 0
    await on_task_exited(exited(job), status_deps(store))
    found = list((await rows(store)).values())
    assert sum(r.gpu_hours_used for r in found) == pytest.approx(0.5, abs=0.001)
    assert sum(r.gpu_hours_measured for r in found) == pytest.approx(2.0, abs=0.001)
    assert sum(r.cpu_core_hours_used for r in found) == pytest.approx(4.0, abs=0.001)
    assert all(r.gpu_utilization == pytest.approx(25.0) for r in found)


async def test_usage_stays_when_its_job_is_deleted_or_expires(store: Store) -> None:
    """Usage is history: a user's delete and retention remove the job, its attempts and its profiles, and
    leave what it held in the rollups."""
    now = now_ms()
    kept, expired = running("carol", "default", now - 4 * H), running("carol", "default", now - 3 * H)
    for job in (kept, expired):
        await store.insert_job(job)
        await on_task_exited(exited(job), status_deps(store))
    before = await held(store)
    assert sum(n for _, n in before.values()) == 2

    assert await store.delete_job(kept.id)
    await store.jobs.update_one({"_id": expired.id}, {"$set": {"completed_ms": now - 10 * DAY_MS}})
    assert await remove_expired(status_deps(store, PAIQ_JOB_RETENTION_DAYS="7")) == 1
    assert await store.get_job(kept.id) is None and await store.get_job(expired.id) is None
    assert await held(store) == before


async def test_a_report_reads_a_users_own_rows_and_their_vcs(store: Store) -> None:
    start = now_ms() - H
    for user, vc in (("dan", "vision"), ("erin", "vision"), ("dan", "speech"), ("fay", "speech")):
        job = running(user, vc, start)
        await store.insert_job(job)
        await on_task_exited(exited(job), status_deps(store))
    dan = Asker(user="dan", admin=False, vcs=("vision",))
    seen = {(vc, user) for (_, vc, user) in await rows(store, dan)}
    assert seen == {("vision", "dan"), ("vision", "erin"), ("speech", "dan")}, "never fay's, in a VC dan left"
    by_vc = await rows(store, dan, Asked(by="vc"))
    assert {(vc, user) for (_, vc, user) in by_vc} == {("vision", None)}
    assert sum(r.jobs for r in by_vc.values()) == 2
    everyone = await rows(store, None, Asked(by="vc"))
    assert {vc for (_, vc, _) in everyone} == {"vision", "speech"}


async def test_an_import_counts_its_finished_jobs(store: Store) -> None:
    start = now_ms() - 5 * H
    done: list[JobRecord] = []
    for user in ("gus", "gus", "hal"):
        job = running(user, "default", start)
        task = job.tasks[0].model_copy(update={"state": TaskState.SUCCEEDED, "completed_ms": start + H})
        done.append(job.model_copy(update={"state": JobState.SUCCEEDED, "tasks": (task,), "completed_ms": start + H}))
    await store.insert_jobs([*done[:2], running("ida", "default", start)])  # the running one is not counted yet
    await store.insert_jobs(done[2:])  # a later batch: hal's rows are new, the VC's day is added to
    counted: dict[str | None, float] = {}
    for (_, _, user), r in (await rows(store)).items():
        counted[user] = counted.get(user, 0.0) + r.gpu_hours_held
    assert counted == {"gus": pytest.approx(4.0), "hal": pytest.approx(2.0)}
    await store.insert_jobs([done[0].model_copy(update={"id": "gus~again~00000000", "name": "again"})])
    assert sum(r.gpu_hours_held for r in (await rows(store, None, Asked(by="vc"))).values()) == pytest.approx(8.0)




async def test_a_task_rerun_in_place_counts_its_earlier_run_from_its_profile(store: Store) -> None:
    """taskRetryCount: the record keeps the current run's times; the first run's profile (task_attempt 0)
    says how long it held its GPUs."""
    now = now_ms()
    job = running("jon", "default", now - H, gpus=1)
    job = job.model_copy(update={"tasks": (job.tasks[0].model_copy(update={"retries": 1}),)})
    await store.insert_job(job)
    first = TaskProfile(job_id=job.id, attempt=0, role="main", index=0, task_attempt=0, node_id="n1", gpus=(0,),
                        interval_ms=10_000, totals=TaskTotals(samples=360, first_ms=now - 3 * H, last_ms=now - 2 * H,
                                                              cpu_seconds=900.0, gpu_held_seconds=3600.0))
    assert await store.profiles.save([ProfileWrite(profile=first, new=True)]) == 0
    ended = exited(job).model_copy(update={"data": exited(job).data.model_copy(update={"task_attempt": 1})})
    await on_task_exited(ended, status_deps(store))
    done = await store.get_job(job.id)
    assert done is not None and done.state == JobState.SUCCEEDED and done.completed_ms is not None
    found = list((await rows(store)).values())
    assert sum(r.gpu_hours_held for r in found) == pytest.approx(1 + (done.completed_ms - (now - H)) / H, abs=0.001)
    assert sum(r.cpu_core_hours_used for r in found) == pytest.approx(0.25, abs=0.001)


async def test_jobs_that_ended_before_the_rollups_are_added_once_at_start(store: Store) -> None:
    """A store of schema version 5 (the rollups came with it: jobs that ended before carry no mark) gets their
    usage added once by the migration to 6: used hours from their profiles, earlier attempts included; a job
    ended since (marked) is not added again, one not yet counted is added when the status service counts it,
    and a second start adds nothing twice (the migration keeps the id of the last job it added)."""
    start = now_ms() - 5 * H
    recent = running("alice", "default", start)  # ended with the rollups there: counted and marked
    old = running("carol", "default", start).model_copy(update={"attempt": 1})  # ended before them, on its 2nd try
    first_try = TaskRecord(role="main", index=0, state=TaskState.FAILED, node_id="n1", ip="10.0.0.1", gpus=(0, 1),
                           container_id="c0", started_ms=start - 2 * H, completed_ms=start - H, exit_code=1)
    await store.attempts.insert_one(AttemptRecord(attempt=0, tasks=(first_try,), launched_ms=start - 2 * H,
                                                  completed_ms=start - H, exit_code=1).to_document(old.id))
    used = running("carol", "vision", start, gpus=1)
    uncounted = running("dave", "default", start)  # ended, its count cut off by a crash
    for job in (recent, old, used, uncounted):
        await store.insert_job(job)
    profile = TaskProfile(job_id=used.id, attempt=0, role="main", index=0, node_id="n1", vc="vision", cpus=4,
                          gpus=(0,), interval_ms=10_000, totals=TaskTotals(
                              samples=360, first_ms=start, last_ms=start + H, cpu_seconds=3600.0,
                              gpu_held_seconds=3600.0, gpu_measured_seconds=3600.0, gpu_used_seconds=900.0))
    assert await store.profiles.save([ProfileWrite(profile=profile, new=True)]) == 0
    d = status_deps(store)
    for job in (recent, old, used, uncounted):
        await on_task_exited(exited(job), d)
    expected = await held(store)
    expected_used = {k: round(r.gpu_hours_used, 3) for k, r in (await rows(store)).items()}
    # 900 GPU-seconds used: a quarter of an hour, split between two days when the job's span crosses midnight (UTC)
    assert sum(v for k, v in expected_used.items() if k[1:] == ("vision", "carol")) == pytest.approx(0.25, abs=0.002)

    old_end = (await must_get(store, old.id)).completed_ms
    assert old_end is not None
    assert sum(h for k, (h, _) in expected.items() if k[2] == "carol" and k[1] == "default") == pytest.approx(
        2 * (old_end - start) / H + 2, abs=0.01), "its first try's 2 GPU-hours too"

    # As a store of version 5 whose old jobs ended before the rollups: no mark, no rows; and dave's count cut off.
    await store.jobs.update_many({}, {"$unset": {"usage_counted": ""}})
    for col in (store.usage.by_user, store.usage.by_vc):
        await col.delete_many({})
    assert await store.usage.record_job(await must_get(store, recent.id), [], atomic=False)  # recent's rows alone
    await store.jobs.update_one({"_id": uncounted.id}, {"$set": {"counted": False}})
    await store.meta.update_one({"_id": "schema"}, {"$set": {"version": 5}})

    await store.ensure_indexes()
    backfilled = await held(store)
    assert {k: v for k, v in backfilled.items() if k[2] == "dave"} == {}, "not counted yet: left to its count"
    assert {k: v for k, v in backfilled.items() if k[2] != "dave"} == {
        k: v for k, v in expected.items() if k[2] != "dave"}
    assert {k: round(r.gpu_hours_used, 3) for k, r in (await rows(store)).items()
            if k[2] == "carol"} == {k: v for k, v in expected_used.items() if k[2] == "carol"}

    await store.count_finished(await must_get(store, uncounted.id))  # the status service's pass
    assert await held(store) == expected
    await store.meta.update_one({"_id": "schema"}, {"$set": {"version": 5}})  # cut off after its last batch
    await store.ensure_indexes()
    await store.ensure_indexes()
    assert await held(store) == expected
    assert (await store.meta.find_one({"_id": "schema"}) or {})["version"] == 6


async def must_get(store: Store, job_id: str) -> JobRecord:
    job = await store.get_job(job_id)
    assert job is not None
    return job


async def test_a_backfill_cut_off_goes_on_where_it_stopped_and_bulk_inserted_jobs_are_marked(store: Store) -> None:
    """Jobs stored in bulk (imports) have their usage counted and carry the mark, so no backfill adds them; the
    backfill writes each chunk's amounts with the id of its last job, so one cut off after some chunks adds the
    rest when started again, none twice (on a server without transactions too: the id first)."""
    start = now_ms() - 4 * H
    jobs = []
    for k in range(5):
        job = running("erin", "default", start, name=f"bf{k}")
        jobs.append(job.model_copy(update={
            "state": JobState.SUCCEEDED, "completed_ms": start + H, "counted": True,
            "tasks": tuple(t.model_copy(update={"state": TaskState.SUCCEEDED, "completed_ms": start + H,
                                                "exit_code": 0}) for t in job.tasks)}))
    await store.insert_jobs(jobs)
    assert [d["usage_counted"] async for d in store.jobs.find({"user": "erin"})] == [True] * 5
    assert sum(h for h, _ in (await held(store)).values()) == pytest.approx(10.0, abs=0.001)  # 2 GPUs x 1 h each
    await store.jobs.update_many({"user": "erin"}, {"$unset": {"usage_counted": ""}})  # as if stored before
    for col in (store.usage.by_user, store.usage.by_vc):
        await col.delete_many({})
    ordered = sorted(jobs, key=lambda j: j.id)

    async def chunks(of: list[JobRecord]) -> AsyncIterator[list[tuple[JobRecord, list[AttemptRecord]]]]:
        for i in range(0, len(of), 2):
            yield [(j, []) for j in of[i:i + 2]]

    assert await store.usage.backfill(chunks(ordered[:2]), store.meta, atomic=False) == 2  # then cut off
    assert await store.usage.backfilled_to(store.meta) == ordered[1].id
    assert sum(h for h, _ in (await held(store)).values()) == pytest.approx(4.0, abs=0.001)
    await store.meta.update_one({"_id": "schema"}, {"$set": {"version": 5}})
    await store.ensure_indexes()  # the migration goes on after the last id added
    assert sum(h for h, _ in (await held(store)).values()) == pytest.approx(10.0, abs=0.001)
    assert await store.usage.backfilled_to(store.meta) == ordered[-1].id


async def test_many_jobs_of_one_user_ending_at_once_are_counted_without_write_conflicts(mongo_uri: str) -> None:
    """Twenty of alice's jobs end at once (a sweep): each is counted once, in her day's usage and the lists'
    counts, and their counting transactions do not collide on those counters (side by side, each but one
    failed with a write conflict and ran again)."""
    counts = CommandCounts()
    client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(mongo_uri, tz_aware=True,
                                                                 event_listeners=[counts])
    try:
        store = Store(client, unique("usage_"))
        await store.ensure_indexes()
        start = now_ms() - H
        jobs = [running("alice", "default", start, gpus=1) for _ in range(20)]
        await store.insert_jobs(jobs)
        ended = [j.model_copy(update={"state": JobState.SUCCEEDED, "sub_state": SubState.COMPLETED,
                                      "completed_ms": now_ms(), "counted": False}) for j in jobs]
        await asyncio.gather(*(store.count_finished(j) for j in ended))
        assert sum(n for _, n in (await held(store)).values()) == 20
        assert await store.list_counts.col.count_documents({}) > 0
        assert counts.conflicts == 0, f"{counts.conflicts} write conflicts counting 20 jobs"
    finally:
        await client.close()
