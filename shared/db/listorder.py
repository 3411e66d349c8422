"""``GET /api/v2/jobs`` in v1.8's other orders (:mod:`shared.db.lists.orders`), each page a few bounded ranges of
an index, as newest first is (:mod:`shared.db.lists.paging`). Four ways, chosen by the order and the filters:

- **mirror** (``submissionTime,ASC`` of one plain list: no ``vc``, keyword or tags): the list's total is known
  from its counters, so the page at ``offset`` ascending is the newest-first page at ``total - offset - limit``,
  read as deep pages are (any offset, about a page); a cursor continues by windows walked forwards.
- **values** (``state``, ``username``, ``vc``; ``retries``, ``totalTaskNumber``, ``totalGpuNumber``,
  ``jobPriority`` without filters): the order is each value's newest-first list, the values in the order's
  direction. Each value's list is one the indexes serve (``state``, ``user``, ``virtual_cluster`` with the other
  filters; ``<field>_created`` for the others) and its size comes from counters where there are some (the deep
  pages' counts per user and state, the tallies per VC, the counted values of :mod:`shared.db.lists.counts`, plus
  the active jobs, few), so whole values are skipped without reading them. The values: a filter's own, the
  states, the VCs, the users with jobs (one small document each), the counted values of a field.
- **completion** (``completionTime`` without filters): the active jobs (no completion time: few, from the partial
  index of uncounted jobs) and the ended ones in windows of ``completed_ms`` walked from now (or forwards from the
  oldest job), as creation time is walked.
- **sorted** (every other combination, ``jobName`` always): no index holds the list in that order, so a list of
  at most :data:`MAX_SORTED` jobs is read whole and sorted (the cost of a few big pages, bounded); a longer one is
  refused with a message that says why, before it is read where its counters tell its size.

Deep offsets: a mirror page or a values page of ``state``/``username`` over lists with counts reaches any offset
at about a page's cost; elsewhere ``offset + limit`` is at most :data:`MAX_WALK` (the cursor goes on from there,
at the cost of the next page).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from shared.db.lists.counts import VALUE_FIELDS
from shared.db.lists.orders import Order, OrderCursor, Value
from shared.db.lists.paging import FIRST_WINDOW_MS, PROJECTION, Cursor, JobPage, JobSummary, list_page, next_window
from shared.records import JobState, now_ms

if TYPE_CHECKING:
    from shared.db.store import Store

Doc = dict[str, Any]
MAX_WALK = 10_000  # offset + limit of an order no counts serve (as for the newest-first lists without them)
MAX_SORTED = 5_000  # the longest list read whole to be sorted
FUTURE_MS = 86_400_000  # how far ahead of this clock a walk forwards still looks (other replicas' clocks)
Combo = tuple[str | None, str | None, str | None]  # username, state, vc


class OrderRefusedError(ValueError):
    """A combination of order, filters and offset that no index serves flat: the sentence says which and why."""


@dataclass(frozen=True)
class Asked:
    """The list asked for: each combination of ``username``, ``state``, ``vc`` values, and the other filters."""

    combos: tuple[Combo, ...]
    keyword: str | None = None
    tags: tuple[str, ...] = ()
    without: frozenset[str] = frozenset()

    @property
    def plain(self) -> bool:
        """One list that the deep pages' counts cover (no vc, keyword or tags)."""
        return len(self.combos) == 1 and self.combos[0][2] is None and not (self.keyword or self.tags or self.without)

    @property
    def unfiltered(self) -> bool:
        return self.combos == ((None, None, None),) and not (self.keyword or self.tags or self.without)


@dataclass(frozen=True)
class OrderedPage:
    jobs: list[JobSummary]
    next_cursor: str | None
    way: str  # mirror, values, completion or sorted (what served it)


def way_of(order: Order, asked: Asked) -> str:
    """Which of the four ways serves this order and these filters (see the module's text)."""
    if order.name == "submissionTime":
        return "mirror" if asked.plain else "sorted"
    if order.name in ("state", "username", "vc"):
        axis = ("username", "state", "vc").index(order.name)
        others_single = all(len({c[i] for c in asked.combos}) == 1 for i in range(3) if i != axis)
        named = asked.combos[0][axis] is not None
        if not others_single or asked.without:
            return "sorted"
        if order.name == "username" and not named and not _user_counts(asked):
            return "sorted"  # every user's list read in turn, without a count to skip the empty ones
        return "values"
    if order.field in VALUE_FIELDS:
        return "values" if asked.unfiltered else "sorted"
    if order.name == "completionTime":
        return "completion" if asked.unfiltered else "sorted"
    return "sorted"  # jobName: no count of jobs per name can be kept flat


def _user_counts(asked: Asked) -> bool:
    return asked.combos[0][2] is None and not (asked.keyword or asked.tags)


def deep_ok(order: Order, asked: Asked, way: str, cursor: OrderCursor | None) -> bool:
    """Whether any offset costs about a page (else ``offset + limit`` is bounded by :data:`MAX_WALK`)."""
    if way == "mirror":
        return cursor is None or order.descending  # an ascending cursor walks forwards from its job
    return way == "sorted" or (way == "values" and order.name in ("state", "username") and _user_counts(asked))


async def ordered_page(store: Store, order: Order, asked: Asked, *, limit: int, offset: int,
                       cursor: OrderCursor | None) -> OrderedPage:
    way = way_of(order, asked)
    if not deep_ok(order, asked, way, cursor) and offset + limit > MAX_WALK:
        raise OrderRefusedError(f"offset + limit: at most {MAX_WALK} with order={order.text} and these filters "
                           "(no count says where a deeper page starts; continue with the cursor of X-Next-Cursor)")
    if way == "mirror":
        jobs, more = await _mirror(store, asked.combos[0], limit, offset, cursor, order.descending)
    elif way == "values":
        jobs, more = await _values(store, order, asked, limit, offset, cursor)
    elif way == "completion":
        jobs, more = await _completion(store, order, limit, offset, cursor)
    else:
        jobs, more = await _sorted(store, order, asked, limit, offset, cursor)
    return OrderedPage(jobs, OrderCursor.after(order, jobs[-1]).encode() if more and jobs else None, way)


# --- mirror: submissionTime,ASC -------------------------------------------------------------------------------

async def _mirror(store: Store, combo: Combo, limit: int, offset: int, cursor: OrderCursor | None,
                  descending: bool) -> tuple[list[JobSummary], bool]:
    user, state, _ = combo
    if descending:  # the default order, as the route serves it (here for completeness: the same pages)
        at = Cursor(cursor.created_ms, cursor.job_id) if cursor is not None else None
        page = await store.list_jobs(limit=limit, offset=offset, cursor=at, user=user, state=state)
        return page.jobs, page.next_cursor is not None
    base: Doc = {k: v for k, v in (("user", user), ("state", state)) if v}
    if cursor is not None:  # forwards from the cursor's job: its own millisecond (smaller ids), then windows
        want = offset + limit + 1
        sort = [("created_ms", 1), ("_id", -1)]
        found = await _read(store, {**base, "created_ms": cursor.created_ms, "_id": {"$lt": cursor.job_id}}, sort, want)
        found += await _walk(store, base, "created_ms", sort, want - len(found), start=cursor.created_ms,
                             ascending=True)
        jobs = [JobSummary.model_validate(d) for d in found[offset:offset + limit]]
        return jobs, len(found) > offset + limit
    total = await store.count_jobs(user=user, state=state) or 0
    end = total - offset  # newest-first position just past this page's first job
    if end <= 0:
        return [], False
    start = max(0, end - limit)
    page = await store.list_jobs(limit=end - start, offset=start, user=user, state=state)
    return list(reversed(page.jobs)), start > 0


# --- values: each value's newest-first list in the order's direction ------------------------------------------

# a value's list: limit, offset, cursor, and how many jobs it holds where known (its walk stops there)
Reader = Callable[[Value, int, int, Cursor | None, int | None], Awaitable[JobPage]]
Sizer = Callable[[Value], Awaitable[int | None]]


async def _values(store: Store, order: Order, asked: Asked, limit: int, offset: int,
                  cursor: OrderCursor | None) -> tuple[list[JobSummary], bool]:
    if order.field not in VALUE_FIELDS:
        return await _combo_values(store, order, asked, limit, offset, cursor)
    sizes = await _field_values(store, order.field)
    field = order.field

    async def read(value: Value, at_most: int, skip: int, at: Cursor | None, holds: int | None) -> JobPage:
        return await list_page(store.jobs, now_ms=now_ms(), limit=at_most, offset=skip, cursor=at, match={field: value},
                               holds=holds)

    async def size(value: Value) -> int | None:
        return sizes.get(value, 0)
    return await concatenated(order, order.values_in_order(set(sizes)), size, read, limit=limit, offset=offset,
                              cursor=cursor)


async def _combo_values(store: Store, order: Order, asked: Asked, limit: int, offset: int,
                        cursor: OrderCursor | None) -> tuple[list[JobSummary], bool]:
    """``state``, ``username``, ``vc``: each value's list is the list of the filters with that value."""
    user, state, vc = asked.combos[0]
    keyword, tags = asked.keyword, asked.tags
    axis = ("username", "state", "vc").index(order.name)

    def combo(value: Value) -> Combo:
        c: list[str | None] = [user, state, vc]
        c[axis] = None if value is None else str(value)
        return c[0], c[1], c[2]

    given: list[Value] = list(dict.fromkeys(str(c[axis]) for c in asked.combos if c[axis] is not None))
    sized: dict[Value, int] | None = None
    values: list[Value]
    if given:
        values = given
    elif order.name == "state":
        values = [str(s.value) for s in JobState]
    elif order.name == "vc":
        values = list(await _vcs(store))
    else:
        sized = await _users(store, state)
        values = list(sized)

    async def read(value: Value, at_most: int, skip: int, at: Cursor | None, holds: int | None) -> JobPage:
        u, s, v = combo(value)
        return await list_page(store.jobs, now_ms=now_ms(), limit=at_most, offset=skip, cursor=at, user=u, state=s,
                               counts=store.list_counts, vc=v, keyword=keyword, tags=tags, holds=holds)

    async def size(value: Value) -> int | None:
        if sized is not None:
            return sized.get(value, 0)
        u, s, v = combo(value)
        return await store.count_jobs(user=u, state=s, vc=v) if not (keyword or tags) else None
    return await concatenated(order, order.values_in_order(set(values)), size, read, limit=limit, offset=offset,
                              cursor=cursor)


async def concatenated(order: Order, values: list[Value], size: Sizer, read: Reader, *, limit: int, offset: int,
                       cursor: OrderCursor | None) -> tuple[list[JobSummary], bool]:
    """``limit`` jobs after ``offset`` (and the cursor) of the values' lists one after the other; whether more
    follow. A value whose size is known is skipped whole when the offset passes it (and is not read when empty);
    one of unknown size is read up to what is still to skip and fill."""
    if cursor is not None:
        here = order.rank(cursor.value, 0, "")[0]
        values = [v for v in values if order.rank(v, 0, "")[0] >= here]
    jobs: list[JobSummary] = []
    skip, more = offset, False
    for value in values:
        at = Cursor(cursor.created_ms, cursor.job_id) if cursor is not None and value == cursor.value else None
        n = await size(value) if at is None else None
        if n is not None and n <= skip:
            skip -= n
            continue
        need = limit - len(jobs)
        if need == 0:  # the page is full: is there a job after it?
            more = n > 0 if n is not None else bool((await read(value, 1, 0, at, None)).jobs)
            if more:
                break
            continue
        if n is not None or skip == 0:
            page = await read(value, need, skip, at, n)
            jobs += page.jobs
        else:
            page = await read(value, skip + need, 0, at, None)
            jobs += page.jobs[skip:]
            if len(page.jobs) <= skip:
                skip -= len(page.jobs)
                continue
        skip = 0
        if page.next_cursor is not None:
            more = len(jobs) == limit
            break
    return jobs, more


async def _active(store: Store) -> list[Doc]:
    """The jobs not counted yet (active work, and an ended job for the moment its count is written)."""
    return [d async for d in store.jobs.find({"counted": False}, PROJECTION)]


async def _field_values(store: Store, field: str) -> dict[Value, int]:
    sizes: dict[Value, int] = dict(await store.list_counts.values(field))
    for d in await _active(store):
        value = d.get(field, 0 if field != "job_priority" else None)
        sizes[value] = sizes.get(value, 0) + 1
    return sizes


async def _vcs(store: Store) -> set[str]:
    names = set((await store.tallies.by_vc()).keys()) | {vc.name for vc in await store.list_vcs()}
    return names | {str(d["virtual_cluster"]) for d in await _active(store)}


async def _users(store: Store, state: str | None) -> dict[Value, int]:
    """Every user with jobs (in ``state``) and how many they hold: the counted ones' document, the active jobs."""
    sizes = await store.list_counts.values("user", state)
    for d in await _active(store):
        if state is None or d.get("state") == state:
            sizes[str(d["user"])] = sizes.get(str(d["user"]), 0) + 1
    return sizes


# --- completion: windows of completed_ms ---------------------------------------------------------------------

async def _completion(store: Store, order: Order, limit: int, offset: int,
                      cursor: OrderCursor | None) -> tuple[list[JobSummary], bool]:
    want = offset + limit + 1
    after = cursor.rank(order) if cursor is not None else ()  # () sorts before every rank
    active = [JobSummary.model_validate(d) for d in await _active(store) if d.get("completed_ms") is None]
    active = [j for j in order.sort(active) if order.rank_of(j) > after]
    sort = [("completed_ms", -1 if order.descending else 1), ("created_ms", -1), ("_id", 1)]
    found: list[JobSummary] = active if order.descending else []
    if not (cursor is not None and cursor.value is None and not order.descending):  # else: past the ended ones
        ended: list[Doc] = []
        if cursor is not None and isinstance(cursor.value, int):  # the cursor's own millisecond first
            own = await _read(store, {"completed_ms": cursor.value}, sort, 0)
            ended = [d for d in own if order.rank(cursor.value, int(d["created_ms"]), str(d["_id"])) > after]
            start = cursor.value
        else:
            start = now_ms() if order.descending else await _oldest(store)
        if len(found) + len(ended) < want:
            ended += await _walk(store, {}, "completed_ms", sort, want - len(found) - len(ended), start=start,
                                 ascending=not order.descending, open_above=cursor is None)
        found += [JobSummary.model_validate(d) for d in ended]
    if not order.descending:
        found += active
    return found[offset:offset + limit], len(found) > offset + limit


async def _oldest(store: Store) -> int:
    """A time at or before every job's creation (so before every completion): the fine bucket of the oldest
    counted job, or the oldest active one; now when there are none."""
    total = await store.count_jobs() or 0
    view = await store.list_counts.view(None, None)
    last = await view.locate(total - 1) if total else None
    times = [int(d["created_ms"]) for d in await _active(store)]
    return min(([last.lo_ms] if last is not None else []) + times, default=now_ms()) - 1


# --- sorted: a short list read whole ------------------------------------------------------------------------

async def _sorted(store: Store, order: Order, asked: Asked, limit: int, offset: int,
                  cursor: OrderCursor | None) -> tuple[list[JobSummary], bool]:
    refused = OrderRefusedError(
        f"order={order.text} with these filters: no index holds the list in that order, so it is sorted when "
        f"asked, which paiq does for a list of at most {MAX_SORTED} jobs and this one holds more (narrow it with "
        "username, state or vc, or order by submissionTime)")
    if not (asked.keyword or asked.tags):
        total = 0
        for user, state, vc in asked.combos:
            n = await store.count_jobs(user=user, state=state, vc=vc)
            total += n if n is not None else 0
        if total > MAX_SORTED:
            raise refused
    jobs: dict[str, JobSummary] = {}
    read = 0
    for user, state, vc in asked.combos:  # at most MAX_SORTED jobs read in all, and one more to know
        page = await store.list_jobs(limit=MAX_SORTED - read + 1, user=user, state=state, vc=vc,
                                     keyword=asked.keyword, tags=asked.tags)
        read += len(page.jobs)
        if read > MAX_SORTED:
            raise refused
        jobs.update((j.id, j) for j in page.jobs if asked.without.isdisjoint(j.tags))
    ordered = order.sort(list(jobs.values()))
    if cursor is not None:
        after = cursor.rank(order)
        ordered = [j for j in ordered if order.rank_of(j) > after]
    return ordered[offset:offset + limit], len(ordered) > offset + limit


# --- reads ------------------------------------------------------------------------------------------------

async def _read(store: Store, query: Doc, sort: list[tuple[str, int]], at_most: int) -> list[Doc]:
    return [d async for d in store.jobs.find(query, PROJECTION).sort(sort).limit(at_most)]


async def _walk(store: Store, base: Doc, field: str, sort: list[tuple[str, int]], want: int, *, start: int,
                ascending: bool, open_above: bool = False) -> list[Doc]:
    """Up to ``want`` jobs whose ``field`` is past ``start`` (after it ascending, before it descending), in the
    sort's order, read in windows from ``start`` sized by the density found so far (as newest-first pages are)."""
    found: list[Doc] = []
    span, covered = FIRST_WINDOW_MS, 0
    end = now_ms() + FUTURE_MS
    while len(found) < want:
        if not ascending and open_above and covered == 0:  # the first window: clocks may differ between replicas
            lo = start - span
            window: Doc = {"$gte": lo}
        elif ascending:
            lo = start + 1 + covered
            if lo > end:
                break
            window = {"$gte": lo} if lo + span > end else {"$gte": lo, "$lt": lo + span}
        else:
            hi = start - covered
            if hi <= 0:
                break
            window = {"$gte": max(0, hi - span), "$lt": hi}
        found += await _read(store, {**base, field: window}, sort, want - len(found))
        covered += span
        span = next_window(span, covered, len(found), want - len(found))
    return found
