"""A list without the jobs that hold some tags (``GET /api/v2/jobs?tagsNotContain=``): no index finds what a
job lacks, so the list it filters (newest first, any other filters, :mod:`shared.db.lists.paging`) is read
in chunks and the jobs holding any of the tags are skipped, reading at most :data:`SCAN_BUDGET` jobs a request.

Where most jobs hold the tags, the budget may run out before the page is full: the page then holds the jobs
found so far (maybe none) and its cursor continues after the last job read, carrying the offset still to skip
(:attr:`shared.db.lists.paging.Cursor.skip`), so each request costs at most the budget, however long the
history, and following the cursors reaches every job of the list once. A page shorter than ``limit`` with a
cursor is such a page: more may follow.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import replace

from shared.db.lists.paging import Cursor, JobPage, JobSummary

SCAN_BUDGET = 1_000  # jobs read per request at most (what a 1,000-job page of the plain list reads: ~0.8 s embedded)
CHUNK = 250

# A newest-first list: ``limit`` jobs after the cursor (None: from the newest), and the next page's cursor.
Reader = Callable[[int, Cursor | None], Awaitable[JobPage]]


def _after(job: JobSummary, skip: int = 0) -> str:
    return Cursor(job.created_ms, job.id, skip).encode()


async def without_tags(read: Reader, tags: frozenset[str], *, limit: int, offset: int, cursor: Cursor | None,
                       budget: int = SCAN_BUDGET) -> JobPage:
    """``limit`` jobs holding none of ``tags``, after ``offset`` such jobs (and the cursor's), newest first."""
    skip = offset + (cursor.skip if cursor else 0)
    at = replace(cursor, skip=0) if cursor else None
    kept: list[JobSummary] = []
    scanned = 0
    while True:
        page = await read(min(CHUNK, budget - scanned), at)
        for job in page.jobs:
            scanned += 1
            if not tags.isdisjoint(job.tags):
                continue
            if skip:
                skip -= 1
                continue
            kept.append(job)
            if len(kept) > limit:  # one more than the page: another page follows
                return JobPage(kept[:limit], _after(kept[limit - 1]))
        if page.next_cursor is None:
            return JobPage(kept, None)
        if scanned >= budget:  # the request's share spent: continue after the last job read
            return JobPage(kept, _after(page.jobs[-1], skip))
        at = Cursor.decode(page.next_cursor)
