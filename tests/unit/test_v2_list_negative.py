"""``GET /api/v2/jobs?tagsNotContain=``'s walk (:mod:`shared.db.lists.negative`) over a newest-first list held in
memory: every job without the tags once, newest first, whatever the offsets, limits and budget; no request
reading more than its budget (plus the chunk that crosses it), however long the list."""

from __future__ import annotations

import base64

import pytest

from shared.db.lists.negative import without_tags
from shared.db.lists.paging import Cursor, JobPage, JobSummary

pytestmark = [pytest.mark.unit, pytest.mark.timeout(30)]


def job(i: int, tags: tuple[str, ...]) -> JobSummary:
    return JobSummary.model_validate({"_id": f"u~j{i}~{i:08x}", "user": "u", "name": f"j{i}",
                                      "virtual_cluster": "default", "state": "SUCCEEDED",
                                      "created_ms": 1_000_000 - i, "tags": tags})


class ListOf:
    """A newest-first list, read as the store's pages are; counts the jobs each request reads."""

    def __init__(self, jobs: list[JobSummary]) -> None:
        self.jobs, self.read = jobs, 0

    async def __call__(self, limit: int, at: Cursor | None) -> JobPage:
        start = 0 if at is None else next(i for i, j in enumerate(self.jobs) if j.id == at.job_id) + 1
        page = self.jobs[start:start + limit]
        self.read += len(page)
        more = start + limit < len(self.jobs) and bool(page)
        return JobPage(page, Cursor(page[-1].created_ms, page[-1].id).encode() if more else None)


def history(n: int, every: int) -> list[JobSummary]:
    """``n`` jobs, one in ``every`` without the tag ``ci``."""
    return [job(i, () if i % every == 0 else ("ci", "x")) for i in range(n)]


@pytest.mark.parametrize(("n", "every", "limit", "offset", "budget"), [
    (100, 1, 7, 0, 1000), (100, 3, 7, 5, 1000), (2000, 50, 3, 4, 300), (2000, 1000, 5, 1, 250), (50, 2, 100, 0, 10),
    (0, 1, 5, 0, 100)])
async def test_following_the_cursors_gives_every_job_without_the_tags_once(
        n: int, every: int, limit: int, offset: int, budget: int) -> None:
    jobs = history(n, every)
    read = ListOf(jobs)
    wanted = [j.id for j in jobs if "ci" not in j.tags][offset:]
    got: list[str] = []
    cursor: Cursor | None = None
    first = True
    for _ in range(10_000):
        read.read = 0
        page = await without_tags(read, frozenset({"ci"}), limit=limit, offset=offset if first else 0, cursor=cursor,
                                  budget=budget)
        assert read.read <= budget, "a request reads at most its budget"
        assert len(page.jobs) <= limit
        got += [j.id for j in page.jobs]
        first = False
        if page.next_cursor is None:
            break
        cursor = Cursor.decode(page.next_cursor)
    assert got == wanted


async def test_a_request_reads_the_same_however_long_the_history() -> None:
    for n in (20_000, 200_000):
        read = ListOf(history(n, 10_000_000))  # only the newest job lacks the tag
        page = await without_tags(read, frozenset({"ci", "nightly"}), limit=20, offset=0, cursor=None, budget=1000)
        assert read.read == 1000 and [j.name for j in page.jobs] == ["j0"] and page.next_cursor is not None
        assert Cursor.decode(page.next_cursor).job_id == read.jobs[999].id


def test_a_cursor_keeps_what_is_still_to_be_skipped_and_refuses_others() -> None:
    assert Cursor.decode(Cursor(5, "a~b", 3).encode()) == Cursor(5, "a~b", 3)
    assert Cursor.decode(Cursor(5, "a~b").encode()) == Cursor(5, "a~b", 0)
    for bad in ("[5,\"a\",-1]", "[5,\"a\",1,2]", "[5,\"a\",true]"):
        with pytest.raises(ValueError):
            Cursor.decode(base64.urlsafe_b64encode(bad.encode()).decode())
