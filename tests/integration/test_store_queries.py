"""Active work apart from history, on the real MongoDB-wire server.

Every query the services run is timed over a store holding a few hundred ended jobs, then again once
it holds 6,000 more: a query whose cost follows active work or the page asked for takes the same time,
one that reads the history takes about twenty times longer. (SecantusDB's ``explain`` does not say
what its executor really reads, and its ``serverStatus`` counts no scanned documents, so time is the
witness here; tests/benchmarks/history.py measures the same at 100,000 jobs.) Then: pages by offset
and by cursor, tallies instead of ``$group``, documents that stay small whatever a job's size and
retries, the migration of older documents, and retention.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import bson
import pytest
from pymongo import AsyncMongoClient

from services.status.service import StatusDeps, remove_expired, retry_policy
from services.submit.routes.logs import archived_attempt
from shared.bus.memory import MemoryBus
from shared.db.listorder import Asked, ordered_page
from shared.db.lists.orders import Order, OrderCursor
from shared.db.lists.paging import Cursor
from shared.db.logs import LogStore, runs_query
from shared.db.profiles import TaskProfile
from shared.db.store import Store
from shared.db.usage import report_queries
from shared.events import TaskExitedData, TaskStartedData
from shared.lifecycle import transitions as lifecycle
from shared.lifecycle.transitions import RetryPolicy
from shared.profiling.series import Series, add
from shared.profiling.usage import Usage
from shared.records import JobRecord, JobState, NodeRecord, PreemptedBy, TaskState, initial_tasks, now_ms
from shared.settings.model import Settings
from shared.taskref import TaskRef
from shared.usage.days import DayRange, day_of
from shared.usage.report import RowFilter
from tests.conftest import mongo_server
from tests.infra import unique
from tests.unit.factories import make_config, role_dict

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

SMALL, HISTORY = 300, 6300
USERS = 20
DAY_MS = 86_400_000
NOW = now_ms()
LAST_30_DAYS = DayRange(first=dt.date.fromisoformat(day_of(NOW - 29 * DAY_MS)), last=dt.date.fromisoformat(day_of(NOW)))
FIRST_DAY = DayRange(first=dt.date.fromisoformat(day_of(NOW - 30 * DAY_MS)),
                     last=dt.date.fromisoformat(day_of(NOW - 30 * DAY_MS)))  # within the small history's 1.4 days


def ended_job(i: int, *, state: JobState = JobState.SUCCEEDED) -> JobRecord:
    """One of the history: created over 30 days, ended, its tasks done on some node."""
    config = make_config(role_dict("main", taskNumber=1 + i % 4), jobName=f"h{i}")
    created = NOW - 30 * DAY_MS + i * (30 * DAY_MS // HISTORY)
    tasks = tuple(t.model_copy(update={"state": TaskState.SUCCEEDED, "node_id": f"n{i % 7}", "ip": "10.0.0.1",
                                       "exit_code": 0, "completed_ms": created + 1000}) for t in initial_tasks(config))
    return JobRecord(id=f"u{i % USERS}~h{i}~{i:08x}", user=f"u{i % USERS}", name=f"h{i}", virtual_cluster="default",
                     config=config, raw_config={}, created_ms=created, completed_ms=created + 1000, state=state,
                     sub_state="completed", tasks=tasks)


def active_job(name: str, *, state: JobState, sub_state: str, node: str | None = None,
               task_state: TaskState = TaskState.WAITING, **extra: Any) -> JobRecord:
    config = make_config(role_dict("main", taskNumber=2), jobName=name)
    tasks = tuple(t.model_copy(update={"node_id": node, "ip": "10.0.0.2" if node else None, "state": task_state})
                  for t in initial_tasks(config))
    return JobRecord(id=f"act~{name}~00000000", user="act", name=name, virtual_cluster="default", config=config,
                     raw_config={}, created_ms=NOW - 1000, state=state, sub_state=sub_state, tasks=tasks, **extra)


ACTIVE = [
    active_job("queued", state=JobState.WAITING, sub_state="queued"),
    active_job("starting", state=JobState.WAITING, sub_state="starting", node="n1"),
    active_job("running", state=JobState.RUNNING, sub_state="running", node="n2", task_state=TaskState.RUNNING),
    active_job("retry", state=JobState.WAITING, sub_state="retry pending"),
    active_job("stopme", state=JobState.RUNNING, sub_state="running", node="n1", task_state=TaskState.RUNNING,
               stop_requested_by="act"),
    active_job("preemptme", state=JobState.RUNNING, sub_state="running", node="n2", task_state=TaskState.RUNNING,
               preempted=PreemptedBy(attempt=0, by="act~queued~00000000", by_vc="default", by_priority="test",
                                     why="priority oppo < test (opportunistic)", at_ms=NOW)),
    # over, but one container is still being stopped: it holds its resources
    active_job("leftover", state=JobState.FAILED, sub_state="stopping", node="n3", task_state=TaskState.RUNNING,
               completed_ms=NOW - 500),
]


Query = Callable[[Store], Awaitable[object]]


def in_order(text: str, offset: int = 0, cursor: OrderCursor | None = None, user: str | None = None,
             state: str | None = None) -> Query:
    """A page of GET /api/v2/jobs in one of v1.8's other orders (shared.db.listorder)."""
    asked = Asked(((user, state, None),))
    return lambda s: ordered_page(s, Order.parse(text), asked, limit=20, offset=offset, cursor=cursor)


QUERIES: dict[str, Query] = {
    "queued_jobs": lambda s: s.queued_jobs(),
    "queue_order": lambda s: s.queue_order(),
    "queue_shares": lambda s: s.queue_shares(),
    "queue_of_vc": lambda s: s.queue_of_vc("default"),
    "placed_jobs": lambda s: s.placed_jobs(),
    "jobs_holding_resources": lambda s: s.jobs_holding_resources(),
    "jobs_on_node": lambda s: s.jobs_on_node("n1"),
    "retry_pending_jobs": lambda s: s.retry_pending_jobs(),
    "jobs_to_stop": lambda s: s.jobs_to_stop(),
    "jobs_to_preempt": lambda s: s.jobs_to_preempt(),
    "uncounted_finished_jobs": lambda s: s.uncounted_finished_jobs(),
    "job_counts_by_vc_and_state": lambda s: s.job_counts_by_vc_and_state(),
    "active_jobs_in_vc": lambda s: s.active_jobs_in_vc("default"),
    "list_jobs limit=20": lambda s: s.list_jobs(limit=20),
    "list_jobs user": lambda s: s.list_jobs(user="u3", limit=20),
    "list_jobs state": lambda s: s.list_jobs(state="FAILED", limit=20),
    "list_jobs cursor": lambda s: s.list_jobs(limit=20, cursor=Cursor(NOW - 20 * DAY_MS, "")),
    # deep pages through the counts: the same cost at offset 250 of 307 jobs and of 6,307, and past the end
    "list_jobs offset=250": lambda s: s.list_jobs(limit=20, offset=250),
    "list_jobs offset=6000": lambda s: s.list_jobs(limit=20, offset=6000),
    "list_jobs user offset=120": lambda s: s.list_jobs(user="u3", limit=20, offset=120),
    "list_jobs state offset=150": lambda s: s.list_jobs(state="SUCCEEDED", limit=20, offset=150),
    "list_jobs cursor offset=200": lambda s: s.list_jobs(limit=20, offset=200, cursor=Cursor(NOW - 29 * DAY_MS, "")),
    # one user's jobs in one state: a page of them, and none at all (u3's jobs all succeeded)
    "list_jobs user+state": lambda s: s.list_jobs(user="u10", state="FAILED", limit=20),
    "list_jobs user+state none": lambda s: s.list_jobs(user="u3", state="FAILED", limit=20),
    # GET /api/v2/jobs's filters (issue 27): each combination with vc one equality prefix of an index, the
    # keyword (a prefix of the name or a word) and tags by their multikey indexes; its totals from counters
    "list_jobs vc": lambda s: s.list_jobs(vc="default", limit=20),
    "list_jobs vc none": lambda s: s.list_jobs(vc="nope", limit=20),
    "list_jobs vc+user": lambda s: s.list_jobs(vc="default", user="u3", limit=20),
    "list_jobs vc+state": lambda s: s.list_jobs(vc="default", state="FAILED", limit=20),
    "list_jobs vc+user+state": lambda s: s.list_jobs(vc="default", user="u10", state="FAILED", limit=20),
    # (matches spread over the history, as a page's windows assume: "h1" finds h1, h10-h19, h100-h199 and then
    # h1000-h1999 in one burst after a long gap, the walk's known worst case, see shared.db.lists.paging)
    "list_jobs keyword": lambda s: s.list_jobs(keyword="H", limit=20),
    "list_jobs keyword none": lambda s: s.list_jobs(keyword="zz", limit=20),
    "list_jobs keyword+user": lambda s: s.list_jobs(keyword="h", user="u2", limit=20),
    "list_jobs tags": lambda s: s.list_jobs(tags=("best",), limit=20),
    "count_jobs": lambda s: s.count_jobs(),
    "count_jobs user+state": lambda s: s.count_jobs(user="u3", state="SUCCEEDED"),
    "count_jobs vc+state": lambda s: s.count_jobs(vc="default", state="FAILED"),
    # its other orders (issue 27): submissionTime,ASC mirrors the newest-first deep pages (any offset, a cursor
    # walks forwards); state and username: each value's list, whole values skipped by their counts; retries, task
    # and GPU totals, priority: each counted value's list by its index; completionTime: windows of completed_ms
    "order submissionTime,ASC": in_order("submissionTime,ASC"),
    "order submissionTime,ASC offset=250": in_order("submissionTime,ASC", 250),
    "order submissionTime,ASC offset=100": in_order("submissionTime,ASC", 100),
    "order submissionTime,ASC cursor": in_order("submissionTime,ASC", cursor=OrderCursor(
        "submissionTime,ASC", NOW - 20 * DAY_MS, NOW - 20 * DAY_MS, "")),
    "order submissionTime,ASC user": in_order("submissionTime,ASC", user="u3"),
    "order state,ASC": in_order("state,ASC"),
    "order state,DESC offset=250": in_order("state,DESC", 250),
    "order state,ASC user": in_order("state,ASC", user="u10"),
    "order username,ASC": in_order("username,ASC"),
    "order username,DESC offset=200": in_order("username,DESC", 200),
    "order username,ASC state": in_order("username,ASC", state="FAILED"),
    "order vc,DESC": in_order("vc,DESC"),
    "order retries,DESC": in_order("retries,DESC"),
    "order totalTaskNumber,ASC": in_order("totalTaskNumber,ASC"),
    "order totalGpuNumber,DESC": in_order("totalGpuNumber,DESC"),
    "order jobPriority,ASC": in_order("jobPriority,ASC"),
    "order completionTime,DESC": in_order("completionTime,DESC"),
    "order completionTime,ASC": in_order("completionTime,ASC"),
    "order completionTime,DESC cursor": in_order("completionTime,DESC", cursor=OrderCursor(
        "completionTime,DESC", NOW - 20 * DAY_MS, NOW - 20 * DAY_MS, "")),
    "tags_of": lambda s: s.tags_of("u1~h1~00000001"),
    "get_job": lambda s: s.get_job("u1~h1~00000001"),
    "find_job": lambda s: s.find_job("u1", "h1"),
    "attempts_of": lambda s: s.attempts_of("u1~h1~00000001"),
    "update_job": lambda s: s.update_job("act~running~00000000", {"state": "RUNNING"}, {"reason": "x"}),
    "expired_jobs": lambda s: s.expired_jobs(NOW - 40 * DAY_MS, 100),
    "profiles.of_job": lambda s: s.profiles.of_job("u1~h1~00000001", 0),
    "profiles.get": lambda s: s.profiles.get(TaskRef(job_id="u1~h1~00000001", attempt=0, role="main", index=0)),
    "profiles.recent": lambda s: s.profiles.recent(TaskRef(job_id="u1~h1~00000001", attempt=0, role="main", index=0),
                                                   12),
    # a task's runs (taskRetryCount: /api/v2's task attempts, v1's log and profile of a run) by their ids, and
    # an earlier attempt's archive by its id
    "logs.runs_of": lambda s: LogStore(s.jobs.database).runs_of(RERUN, 2, 100),
    "logs.get_run": lambda s: LogStore(s.jobs.database).get_run(RERUN),
    "archived attempt": lambda s: s.attempts.find_one(archived_attempt("u1~h1~00000001", 0)),
    # the usage report (issue 29): days of the rollups, never the jobs; by VC, one user's, a user's and their VCs'.
    # Timed over the history's first day, which the small history fills already: a report's answer grows with
    # the days and users it covers (as it should), its cost must not grow with the rows of other days.
    "usage.rows by vc": lambda s: s.usage.rows(FIRST_DAY, (RowFilter(),), by_vc=True),
    "usage.rows user": lambda s: s.usage.rows(FIRST_DAY, (RowFilter(user="u3"),), by_vc=False),
    "usage.rows user+vcs": lambda s: s.usage.rows(FIRST_DAY, (RowFilter(user="u3"), RowFilter(vcs=("default",))),
                                                  by_vc=False),
    # notifications (issue 28): the tries due (a partial index: the sent history is not in it), a digest's held ones
    # (its owner's in its window), a user's recent deliveries (windows back from now), subscriptions and address, a
    # change handled
    "notifications.due": lambda s: s.notifications.due(NOW, 100),
    "notifications.held": lambda s: s.notifications.held("digest-u3", "u3", NOW - 3_600_000, NOW),
    "notifications.deliveries_of": lambda s: s.notifications.deliveries_of("u3", NOW - 7 * DAY_MS, 50, NOW),
    "notifications.subscriptions_of": lambda s: s.notifications.subscriptions_of("u3"),
    "notifications.user_email": lambda s: s.notifications.user_email("u3"),
    "notifications.change_handled": lambda s: s.notifications.change_handled("u1~h1~00000001/running"),
    # the notifier's burst: the changed jobs, their owners' subscriptions and addresses, webhooks by id, together
    "get_jobs": lambda s: s.get_jobs(["u1~h1~00000001", "u2~h2~00000002"]),
    "notifications.job_facts": lambda s: s.notifications.job_facts(["u1~h1~00000001", "u2~h2~00000002"]),
    "notifications.subscriptions_of_many": lambda s: s.notifications.subscriptions_of_many(["u3", "u4", ""]),
    "notifications.user_emails": lambda s: s.notifications.user_emails(["u3", "u4"]),
    "notifications.subscriptions_by_id": lambda s: s.notifications.subscriptions_by_id(["a", "b"]),
}


RERUN = TaskRef(job_id="u1~h1~00000001", attempt=0, role="main", index=0, task_attempt=1)


def runs_of(jobs: list[JobRecord]) -> list[dict[str, Any]]:
    """Each ended job's task runs as their launchers recorded them (a task of every tenth job ran three times)."""
    return [{"_id": TaskRef(job_id=job.id, attempt=0, role=t.role, index=t.index, task_attempt=n).id,
             "job_id": job.id, "attempt": 0, "role": t.role, "index": t.index, "task_attempt": n,
             "node_id": t.node_id or "n0", "phase": "ended", "container_id": f"c{k}-{n}", "exit_code": 0}
            for k, job in enumerate(jobs) for t in job.tasks for n in range(3 if k % 10 == 1 else 1)]


def deliveries_of(jobs: list[JobRecord], *, recent: bool = False) -> list[dict[str, Any]]:
    """A delivery per job, sent when it ended (or, ``recent``, within the last hour: the page a user reads)."""
    return [{"_id": f"d-{job.id}", "owner": job.user, "job_id": job.id, "job_name": job.name, "kind": "failed",
             "channel": "webhook", "target": "http://hooks.example/", "state": "sent", "tries": 1, "next_ms": 0,
             "lease_ms": 0, "created_ms": NOW - 1000 - k if recent else job.completed_ms, "subject": "s",
             "expires_at": dt.datetime.fromtimestamp(NOW / 1000 + 86_400, dt.UTC)}
            for k, job in enumerate(jobs)]


def profiles_of(jobs: list[JobRecord]) -> list[dict[str, Any]]:
    """Each ended job's task profiles, each with a few points (the launchers left them)."""
    docs = []
    for job in jobs:
        for t in job.tasks:
            series = Series()
            for k in range(1, 6):
                series = add(series, Usage(t_ms=job.created_ms + k * 10_000, span_ms=10_000, cpu=1.0, mem=2**20,
                                           mem_peak=2**20)).series
            docs.append(TaskProfile(id=f"{job.id}/0/{t.role}/{t.index}", job_id=job.id, attempt=0, role=t.role,
                                    index=t.index, node_id=t.node_id or "n0", interval_ms=10_000,
                                    series=series).to_document())
    return docs


async def best_time(store: Store, name: str, runs: int = 7) -> float:
    """The fastest of ``runs`` runs of one query: noise only ever adds time."""
    best = float("inf")
    for _ in range(runs):
        start = time.perf_counter()
        await QUERIES[name](store)
        best = min(best, time.perf_counter() - start)
    return best


async def timings(store: Store) -> dict[str, float]:
    return {name: await best_time(store, name) for name in QUERIES}


def history_of(lo: int, hi: int) -> list[JobRecord]:
    return [ended_job(i, state=JobState.FAILED if i % 10 == 0 else JobState.SUCCEEDED) for i in range(lo, hi)]


@pytest.fixture(scope="module")
async def private_uri() -> AsyncIterator[str]:
    """A server of this module's own (unless PAIQ_TEST_MONGODB_URI names one): timings must not include
    what other tests' leftover work asks of a shared one."""
    async with mongo_server() as uri:
        yield uri


@pytest.fixture(scope="module")
async def history(private_uri: str) -> AsyncIterator[tuple[Store, dict[str, float], dict[str, float]]]:
    """The store with a small history, then a large one; each query's time with both."""
    client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(private_uri)
    store = Store(client, unique("hist_"))
    await store.ensure_indexes()
    await store.insert_jobs(history_of(0, SMALL))
    await store.profiles.col.insert_many(profiles_of(history_of(0, SMALL)))
    await LogStore(store.jobs.database).runs.insert_many(runs_of(history_of(0, SMALL)))
    await store.notifications.deliveries.insert_many(deliveries_of(history_of(0, SMALL)))
    await store.notifications.deliveries.insert_many(  # u3's page of recent deliveries
        deliveries_of([ended_job(i).model_copy(update={"id": f"r{i}", "user": "u3"}) for i in range(60)], recent=True))
    for job in ACTIVE:
        await store.insert_job(job)
    small = await timings(store)
    await store.insert_jobs(history_of(SMALL, HISTORY))
    await store.profiles.col.insert_many(profiles_of(history_of(SMALL, HISTORY)))
    await LogStore(store.jobs.database).runs.insert_many(runs_of(history_of(SMALL, HISTORY)))
    await store.notifications.deliveries.insert_many(deliveries_of(history_of(SMALL, HISTORY)))
    await asyncio.sleep(1)  # let the server settle after the bulk insert
    big = await timings(store)
    yield store, small, big
    await client.close()


Stores = tuple[Store, dict[str, float], dict[str, float]]


async def test_the_usage_reports_timed_read_the_first_days_rows(history: Stores) -> None:
    """The usage timings are of a window with rows in it (the small history's first day), the same rows after
    twenty times the history was added on later days."""
    store, _, _ = history
    rows = await store.usage.rows(FIRST_DAY, (RowFilter(),), by_vc=False)  # the day ends within the small history
    assert rows and {r.day for r in rows} == {FIRST_DAY.first.isoformat()}
    assert sum(r.jobs for r in rows) == sum(day_of(j.created_ms) == FIRST_DAY.first.isoformat()
                                            for j in history_of(0, SMALL))


@pytest.mark.parametrize("name", list(QUERIES))
async def test_no_query_costs_more_with_twenty_times_the_history(history: Stores, name: str) -> None:
    store, small, big = history
    took = big[name]
    for _ in range(3):  # a machine loaded by other work can slow every one of 7 runs: time again, after a pause
        if took <= 3 * small[name] + 0.005:
            break
        await asyncio.sleep(1)
        took = min(took, await best_time(store, name, runs=15))
    assert took <= 3 * small[name] + 0.005, (
        f"{name}: {took * 1000:.1f} ms with {HISTORY} ended jobs, {small[name] * 1000:.1f} ms with {SMALL}")


@pytest.mark.parametrize(("filters", "by_vc", "indexes"), [
    ((RowFilter(),), True, ["usage_day"]),
    ((RowFilter(vcs=("default", "vision")),), True, ["usage_vc_day", "usage_vc_day"]),
    ((RowFilter(),), False, ["usage_day"]),
    ((RowFilter(user="u3"), RowFilter(vcs=("default",))), False, ["usage_user_day", "usage_vc_day"]),
    ((RowFilter(user="u3", vcs=("default", "vision")),), False, ["usage_user_day"]),
])
async def test_every_read_of_a_usage_report_is_a_range_of_an_index(
        history: Stores, filters: tuple[RowFilter, ...], by_vc: bool, indexes: list[str]) -> None:
    """The report's reads as the server plans them (explain): each one range of days of one index."""
    store, _, _ = history
    col = store.usage.by_vc if by_vc else store.usage.by_user
    used = []
    for query, _ in report_queries(*LAST_30_DAYS.bounds(), filters):
        plan = (await col.find(query).explain())["queryPlanner"]["winningPlan"]
        assert plan.get("inputStage", {}).get("stage") == "IXSCAN", f"{query}: {plan}"
        used.append(plan["inputStage"]["indexName"])
    assert used == indexes


async def test_a_tasks_runs_and_an_archived_attempt_are_read_by_id(history: Stores) -> None:
    """The task-run reads as the server plans them (explain): the ``_id`` index, whatever the runs stored."""
    store, _, _ = history
    logs = LogStore(store.jobs.database)
    for col, query in ((logs.runs, runs_query(RERUN, 2, 100)), (logs.runs, {"_id": RERUN.id}),
                       (store.attempts, archived_attempt("u1~h1~00000001", 0))):
        plan = (await col.find(query).explain())["queryPlanner"]["winningPlan"]
        assert (plan.get("inputStage", {}).get("stage"), plan["inputStage"].get("indexName")) == ("IXSCAN", "_id_"), \
            plan
    assert [r.task_attempt for r in await logs.runs_of(RERUN, 2, 100)] == [2, 1, 0], "newest first"
    assert [r.task_attempt for r in await logs.runs_of(RERUN, 2, 2)] == [2, 1], "at most the runs asked for"


async def test_the_passes_find_exactly_the_active_work(history: Stores) -> None:
    store, _, _ = history
    assert [j.name for j in await store.queued_jobs()] == ["queued"]
    assert {j.name for j in await store.placed_jobs()} == {"starting", "running", "stopme", "preemptme", "retry"}
    assert {j.name for j in await store.jobs_holding_resources()} == {"starting", "running", "stopme", "preemptme",
                                                                           "leftover"}
    assert {j.name for j in await store.jobs_on_node("n1")} == {"starting", "stopme"}
    assert [j.name for j in await store.retry_pending_jobs()] == ["retry"]
    assert [j.name for j in await store.jobs_to_stop()] == ["stopme"]
    assert [j.name for j in await store.jobs_to_preempt()] == ["preemptme"]
    assert [j.name for j in await store.uncounted_finished_jobs()] == ["leftover"], "ended, inserted uncounted"
    counts = await store.job_counts_by_vc_and_state()
    assert counts["default"] == {"SUCCEEDED": HISTORY - HISTORY // 10, "FAILED": HISTORY // 10,
                                 "WAITING": 3, "RUNNING": 3}
    assert await store.active_jobs_in_vc("default") == 6
    first = await store.list_jobs(limit=20)
    assert [j.name for j in first.jobs[:7]] == sorted(j.name for j in ACTIVE), "newest first, ties by id"


async def test_pages_by_cursor_and_by_offset_give_every_job_once_newest_first(
        history: Stores) -> None:
    store, _, _ = history
    everything = (await store.list_jobs(limit=10000)).jobs
    assert len(everything) == HISTORY + len(ACTIVE)
    keys = [(-j.created_ms, j.id) for j in everything]
    assert keys == sorted(keys), "created_ms descending, then id"
    walked: list[str] = []
    cursor: Cursor | None = None
    while True:
        page = await store.list_jobs(user="u7", limit=37, cursor=cursor)
        walked += [j.id for j in page.jobs]
        if page.next_cursor is None:
            break
        cursor = Cursor.decode(page.next_cursor)
    assert walked == [j.id for j in everything if j.user == "u7"]
    by_offset = (await store.list_jobs(limit=25, offset=100)).jobs
    assert [j.id for j in by_offset] == [j.id for j in everything[100:125]]
    failed = (await store.list_jobs(state="FAILED", limit=10000)).jobs
    assert [j.id for j in failed] == [j.id for j in everything if j.state is JobState.FAILED]
    summary = everything[-1]
    assert (summary.task_count, summary.role_count, summary.gpu_count) == (1, 1, 0)


async def test_deep_pages_are_the_same_jobs_as_the_whole_list_shows(history: Stores) -> None:
    """Offsets past DEEP_FROM are found through the counts: every filter, a cursor with an offset, past
    the end; the active jobs (not counted) and the ended leftover (not counted yet) included."""
    store, _, _ = history
    everything = (await store.list_jobs(limit=10000)).jobs
    cases: list[tuple[str | None, str | None, list[str]]] = [
        (None, None, [j.id for j in everything]),
        ("u7", None, [j.id for j in everything if j.user == "u7"]),
        (None, "FAILED", [j.id for j in everything if j.state is JobState.FAILED]),
        ("u10", "FAILED", [j.id for j in everything if j.user == "u10" and j.state is JobState.FAILED]),
        (None, "RUNNING", [j.id for j in everything if j.state is JobState.RUNNING]),
    ]
    for user, state, ids in cases:
        for offset in (101, 250, len(ids) // 2, len(ids) - 7, len(ids), len(ids) + 500):
            page = await store.list_jobs(user=user, state=state, limit=20, offset=offset)
            assert [j.id for j in page.jobs] == ids[offset:offset + 20], (user, state, offset)
            assert (page.next_cursor is not None) == (offset + 20 < len(ids)), (user, state, offset)
    ids = [j.id for j in everything]
    at = everything[1000]
    page = await store.list_jobs(limit=30, offset=2000, cursor=Cursor(at.created_ms, at.id))
    assert [j.id for j in page.jobs] == ids[3001:3031]
    assert page.next_cursor is not None
    following = await store.list_jobs(limit=30, cursor=Cursor.decode(page.next_cursor))
    assert [j.id for j in following.jobs] == ids[3031:3061]


async def test_the_v2_list_filters_find_exactly_their_jobs_and_count_them_from_counters(history: Stores) -> None:
    store, _, _ = history
    everyone = (await store.list_jobs(limit=10_000)).jobs
    assert await store.count_jobs() == len(everyone)
    assert await store.count_jobs(vc="default", state="FAILED") == sum(
        1 for j in everyone if j.virtual_cluster == "default" and j.state == JobState.FAILED)
    assert await store.count_jobs(user="u3") == sum(1 for j in everyone if j.user == "u3")
    assert await store.count_jobs(vc="default", user="u3") is None, "no counter covers a VC with a user"
    page = await store.list_jobs(vc="default", user="u10", state="FAILED", limit=10_000)
    assert [j.id for j in page.jobs] == [j.id for j in everyone
                                         if j.user == "u10" and j.state == JobState.FAILED]
    found = await store.list_jobs(keyword="H29", limit=10_000)
    assert sorted(j.name for j in found.jobs) == sorted(j.name for j in everyone if j.name.startswith("h29"))
    await store.add_tag("u1~h1~00000001", "best")
    await store.add_tag("u1~h1~00000001", "best")
    tagged = await store.list_jobs(tags=("best", "other"), limit=20)
    assert [j.id for j in tagged.jobs] == ["u1~h1~00000001"] and tagged.jobs[0].tags == ("best",)
    assert await store.delete_tag("u1~h1~00000001", "best") and not await store.delete_tag("u1~h1~00000001", "best")
    assert await store.tags_of("u1~h1~00000001") == ()


async def test_ended_jobs_are_tallied_once_and_untallied_when_deleted(history: Stores) -> None:
    store, _, _ = history
    [leftover] = [j for j in await store.uncounted_finished_jobs() if j.name == "leftover"]
    before = (await store.job_counts_by_vc_and_state())["default"]
    await store.count_finished(leftover)
    await store.tallies.add(leftover.virtual_cluster, leftover.state.value, leftover.id)  # a retry after a crash
    after = (await store.job_counts_by_vc_and_state())["default"]
    assert after["FAILED"] == before["FAILED"] + 1
    assert await store.uncounted_finished_jobs() == []
    assert await store.delete_job(leftover.id)
    await store.tallies.remove(leftover.virtual_cluster, leftover.state.value, leftover.id)  # again: no-op
    assert (await store.job_counts_by_vc_and_state())["default"]["FAILED"] == before["FAILED"]
    assert not await store.delete_job(leftover.id)
    everything = [j.id for j in (await store.list_jobs(limit=10000)).jobs]
    assert leftover.id not in everything
    deep = await store.list_jobs(limit=20, offset=len(everything) - 25)
    assert [j.id for j in deep.jobs] == everything[-25:-5], "counted, then deleted: the counts followed"


async def test_a_2000_task_job_retried_10_times_stays_under_2_mb(mongo_uri: str) -> None:
    client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(mongo_uri)
    store = Store(client, unique("big_"))
    await store.ensure_indexes()
    config = make_config(role_dict("main", taskNumber=2000), jobName="big", retryCount=10)
    policy = RetryPolicy(table=retry_policy(Settings.from_env({})).table)
    job = JobRecord(id="u~big~00000000", user="u", name="big", virtual_cluster="default", config=config,
                    raw_config={}, created_ms=NOW, tasks=initial_tasks(config))
    await store.insert_job(job)
    for attempt in range(11):
        job = await _run_attempt(store, job, attempt, policy)
    size = len(bson.encode(await store.jobs.find_one({"_id": job.id}) or {}))
    assert job.state is JobState.FAILED and job.retry_counts.user == 10
    plain = len(bson.encode(job.to_document(packed=False)))  # packed (shared/packing.py), it is far smaller
    assert size <= plain < 2 * 1024 * 1024, f"the job document is {size} bytes, {plain} written plain"
    archived = [len(bson.encode(d)) async for d in store.attempts.find({"job_id": job.id})]
    assert len(archived) == 10 and max(archived) < 2 * 1024 * 1024
    attempts = await store.attempts_of(job.id)
    assert [a.attempt for a in attempts] == list(range(10))
    assert all(len(t.diagnostics) <= 4000 for a in attempts for t in a.tasks)
    await client.close()


async def _run_attempt(store: Store, job: JobRecord, attempt: int, policy: RetryPolicy) -> JobRecord:
    """Place every task, start and fail them all with a 4,000-character stderr tail, through the pure
    state machine and the store as the status service does."""
    tasks = tuple(t.model_copy(update={"node_id": f"n{t.index % 100}", "ip": "10.0.0.3", "ports": {"http": (20000,)}})
                  for t in job.tasks)
    [job] = await store.commit_placements([(job, tasks)])
    for t in job.tasks:
        change = lifecycle.task_started(job, TaskStartedData(job_id=job.id, attempt=attempt, role=t.role,
                                                             index=t.index, node_id=str(t.node_id),
                                                             container_id="c" * 64), NOW)
        job = change[0] if change else job
    for t in job.tasks:
        change = lifecycle.task_exited(job, TaskExitedData(
            job_id=job.id, attempt=attempt, role=t.role, index=t.index, node_id=str(t.node_id), exit_code=3,
            reason="command exited with code 3", diagnostics="Traceback: boom\n" * 250), NOW, policy)
        job = change[0] if change else job
    retried = lifecycle.retry_due(job, NOW + 10**9)
    job = retried[0] if retried else job
    stored = await store.get_job(job.id)
    assert stored is not None
    assert await store.replace_job(job, stored.version)
    again = await store.get_job(job.id)
    assert again is not None
    return again


async def test_older_documents_are_migrated_once(mongo_uri: str) -> None:
    client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(mongo_uri)
    db = unique("old_")
    legacy = ended_job(1, state=JobState.FAILED).to_document()
    for derived in ("holds", "hold_nodes", "task_count", "gpu_count", "role_count", "counted"):
        del legacy[derived]
    legacy["attempts"] = [{"attempt": 0, "tasks": legacy["tasks"], "exit_code": 3}]
    await client[db]["jobs"].insert_one(legacy)
    store = Store(client, db)
    await store.ensure_indexes()
    await store.ensure_indexes()  # a second start changes nothing
    job = await store.get_job(legacy["_id"])
    assert job is not None and job.counted
    raw = await store.jobs.find_one({"_id": legacy["_id"]})
    assert raw is not None and "attempts" not in raw and raw["task_count"] == 2 and raw["holds"] is False
    assert [a.exit_code for a in await store.attempts_of(job.id)] == [3]
    assert (await store.job_counts_by_vc_and_state()) == {"default": {"FAILED": 1}}
    await client.close()


async def test_jobs_stored_before_name_keys_are_keyed_once_at_start(mongo_uri: str) -> None:
    client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(mongo_uri)
    store = Store(client, unique("keys_"))
    await store.ensure_indexes()
    await store.insert_jobs(history_of(0, 30))
    await store.jobs.update_many({}, {"$unset": {"name_keys": ""}})  # as a database of schema version 3 had them
    await store.meta.update_one({"_id": "schema"}, {"$set": {"version": 3}})
    counts_before = await store.list_counts.col.count_documents({})
    await store.ensure_indexes()
    assert [j.name for j in (await store.list_jobs(keyword="h2", limit=50)).jobs] == ["h29", "h28", "h27", "h26",
                                                                                      "h25", "h24", "h23", "h22",
                                                                                      "h21", "h20", "h2"]
    assert await store.list_counts.col.count_documents({}) == counts_before, "version 3's counts kept, not redone"
    assert (await store.meta.find_one({"_id": "schema"}) or {})["version"] == 6  # 6: earlier usage added
    await client.close()


async def test_a_history_stored_before_the_counts_is_counted_once_at_start(mongo_uri: str) -> None:
    client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(mongo_uri)
    store = Store(client, unique("counts_"))
    await store.ensure_indexes()
    await store.insert_jobs(history_of(0, 400))
    await store.insert_job(active_job("now", state=JobState.RUNNING, sub_state="running"))
    await store.list_counts.col.delete_many({})  # as a database of schema version 2 had them: none
    await store.meta.update_one({"_id": "schema"}, {"$set": {"version": 2}})
    await store.ensure_indexes()
    ids = [j.id for j in (await store.list_jobs(limit=10000)).jobs]
    for offset in (150, 380, 395):
        assert [j.id for j in (await store.list_jobs(limit=10, offset=offset)).jobs] == ids[offset:offset + 10]
    before = await store.list_counts.col.count_documents({})
    await store.ensure_indexes()  # a second start counts nothing again
    assert await store.list_counts.col.count_documents({}) == before
    assert [j.id for j in (await store.list_jobs(limit=10, offset=150)).jobs] == ids[150:160]
    await client.close()


async def test_retention_removes_old_ended_jobs_in_batches(mongo_uri: str) -> None:
    client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(mongo_uri)
    store = Store(client, unique("keep_"))
    await store.ensure_indexes()
    now = now_ms()
    old = [ended_job(i).model_copy(update={"completed_ms": now - 10 * DAY_MS}) for i in range(250)]
    recent = [ended_job(1000 + i).model_copy(update={"completed_ms": now - DAY_MS}) for i in range(5)]
    holding = active_job("old-leftover", state=JobState.FAILED, sub_state="stopping", node="n1",
                         task_state=TaskState.RUNNING, completed_ms=now - 10 * DAY_MS)
    await store.insert_jobs([*old, *recent, holding])
    await store.upsert_node(NodeRecord(_id="n1", ip="10.0.0.1", cpus=4, memory_mb=1024, port_range=(1, 2)))
    settings = Settings.from_env({"PAIQ_JOB_RETENTION_DAYS": "7"})
    deps = StatusDeps(settings=settings, store=store, bus=MemoryBus(), policy=retry_policy(settings))
    assert await remove_expired(deps) == 250
    left = {j.name for j in (await store.list_jobs(limit=100)).jobs}
    assert left == {j.name for j in recent} | {"old-leftover"}, "recent ones and one still holding stay"
    assert (await store.job_counts_by_vc_and_state())["default"]["SUCCEEDED"] == 5
    off = StatusDeps(settings=Settings.from_env({}), store=store, bus=MemoryBus(), policy=deps.policy)
    assert await remove_expired(off) == 0
    await client.close()
