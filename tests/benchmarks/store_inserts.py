"""Benchmark: what a job insert costs the MongoDB-wire server as the history grows, and which of paiq's
indexes and document sizes cost the most.

    .venv/bin/python tests/benchmarks/store_inserts.py [--jobs 20000 --batch 500 --window 2000 --mongo-uri URI]
        [--smoke]

For each variant, a fresh database gets --jobs ended jobs (2 tasks each, like a typical history row)
inserted in batches through the project's own store (``Store.insert_jobs``), and the insert rate is
measured over the first and over the last --window (2,000) jobs: the ratio says how the server degrades
with size. Variants: paiq's indexes as they are; no secondary index at all; each secondary index left out
in turn (which one costs most); and paiq's indexes with 8-task jobs whose tasks carry stderr tails
(document size). Prints a table and, last, one JSON line of the figures.

``--smoke``: 200 jobs in batches of 50, windows of 100, every variant (seconds: that the benchmark runs,
not its figures).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import bson
from pymongo import AsyncMongoClient

from shared.db.embedded import embedded_mongo
from shared.db.store import Store
from shared.records import JobRecord, JobState, TaskState, initial_tasks
from tests.unit.factories import make_config, role_dict


@dataclass(frozen=True)
class Result:
    variant: str
    doc_bytes: int
    first_per_s: float
    last_per_s: float

    @property
    def ratio(self) -> float:
        return self.first_per_s / self.last_per_s if self.last_per_s else float("inf")


def ended(i: int, tasks: int, diagnostics: str) -> JobRecord:
    config = make_config(role_dict("main", taskNumber=tasks), jobName=f"j{i}")
    created = 1_790_000_000_000 + i * 1000
    done = tuple(t.model_copy(update={"state": TaskState.FAILED, "node_id": f"node{i % 50}", "ip": "10.1.2.3",
                                      "container_id": f"{i:064x}", "exit_code": 1, "diagnostics": diagnostics,
                                      "reason": "command exited with code 1", "started_ms": created,
                                      "completed_ms": created + 5000}) for t in initial_tasks(config))
    return JobRecord(id=f"user{i % 200}~j{i}~{i:08x}", user=f"user{i % 200}", name=f"j{i}", virtual_cluster="default",
                     config=config, raw_config={"jobName": f"j{i}"}, created_ms=created, completed_ms=created + 5000,
                     state=JobState.FAILED, sub_state="completed", tasks=done, exit_code=1)


async def run_variant(uri: str, name: str, jobs: int, batch: int, window: int, *, drop: list[str] | None,
                      tasks: int, diagnostics: str) -> Result:
    client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(uri)
    store = Store(client, f"bench_{name.replace(' ', '_').replace('-', '_')}_{os.getpid()}")
    await store.ensure_indexes()
    indexes = [str(ix["name"]) async for ix in await store.jobs.list_indexes()]
    for ix in indexes:
        if ix != "_id_" and (drop is None or ix in drop):
            await store.jobs.drop_index(ix)
    records = [ended(i, tasks, diagnostics) for i in range(jobs)]
    marks: dict[int, float] = {0: time.perf_counter()}
    for start in range(0, jobs, batch):
        await store.insert_jobs(records[start:start + batch])
        marks[start + batch] = time.perf_counter()
    await client.drop_database(store.jobs.database.name)
    await client.close()

    def rate(lo: int, hi: int) -> float:
        a, b = max(k for k in marks if k <= lo), min(k for k in marks if k >= hi)
        return (b - a) and (b - a) / (marks[b] - marks[a])

    size = len(bson.encode(records[0].to_document()))
    return Result(name, size, rate(0, window), rate(jobs - window, jobs))


@asynccontextmanager
async def server(uri: str | None) -> AsyncIterator[str]:
    if uri:
        yield uri
        return
    async with embedded_mongo(None) as embedded:
        yield embedded


async def run(a: argparse.Namespace) -> list[Result]:
    results = []
    async with server(a.mongo_uri) as uri:
        probe = Store(AsyncMongoClient(uri), "bench_probe")
        await probe.ensure_indexes()
        secondary = [str(ix["name"]) async for ix in await probe.jobs.list_indexes() if ix["name"] != "_id_"]
        variants: list[tuple[str, list[str] | None, int, str]] = [
            ("paiq's indexes", [], 2, ""), ("no secondary index", None, 2, "")]
        variants += [(f"without {ix}", [ix], 2, "") for ix in secondary]
        variants.append(("paiq's, 8 tasks with stderr tails", [], 8, "Traceback ...\n" * 16))
        for name, drop, tasks, diag in variants:
            results.append(await run_variant(uri, name, a.jobs, a.batch, a.window, drop=drop, tasks=tasks,
                                             diagnostics=diag))
            r = results[-1]
            print(f"  {name}: {r.first_per_s:.0f} -> {r.last_per_s:.0f} jobs/s", file=sys.stderr)
    return results


def table(results: list[Result], jobs: int, window: int) -> str:
    first, last = f"jobs/s first {window:,}", f"jobs/s last {window:,} of {jobs:,}"
    lines = [f"{'variant':45} {'doc bytes':>9} {first:>18} {last:>26} {'ratio':>6}"]
    lines += [f"{r.variant:45} {r.doc_bytes:>9} {r.first_per_s:>18.0f} {r.last_per_s:>26.0f} {r.ratio:>6.2f}"
              for r in results]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--jobs", type=int, default=20000)
    p.add_argument("--batch", type=int, default=500)
    p.add_argument("--mongo-uri", default=os.environ.get("PAIQ_TEST_MONGODB_URI"),
                   help="default: a private in-memory SecantusDB")
    p.add_argument("--window", type=int, default=2000, help="jobs over which the first and last rates are taken")
    p.add_argument("--smoke", action="store_true", help="a small run: 200 jobs, windows of 100")
    a = p.parse_args(argv)
    if a.smoke:
        a.jobs, a.batch, a.window = 200, 50, 100
    if a.jobs < 2 * a.window:
        p.error(f"--jobs must be at least twice --window ({2 * a.window})")
    results = asyncio.run(run(a))
    print(table(results, a.jobs, a.window))
    base = results[0]
    print(json.dumps({
        "jobs": a.jobs, "window": a.window, "load_average": [round(x, 2) for x in os.getloadavg()],
        "insert_per_s_first": round(base.first_per_s), "insert_per_s_last": round(base.last_per_s),
        "degradation_ratio": round(base.ratio, 2),
        "variants": {r.variant: {"doc_bytes": r.doc_bytes, "first_per_s": round(r.first_per_s),
                                 "last_per_s": round(r.last_per_s)} for r in results},
    }))


if __name__ == "__main__":
    main()
