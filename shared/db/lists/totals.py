"""How many jobs a list holds (``GET /api/v2/jobs?withTotalCount=true``), from counters kept as jobs end,
never by counting the history at request time.

The ended jobs marked ``counted`` are in two sets of counters: the list counts per owner (everyone, each
user; :mod:`shared.db.lists.buckets`), whose top-level document holds a list's jobs per ~25-day bucket and
per state, and the tallies per virtual cluster and state (:mod:`shared.db.tallies`). The jobs not counted yet
(the active ones, few) are counted from the partial index ``uncounted``. So a list by user, state, both,
or by VC (with or without state) has an exact total from a handful of small documents; a list that no
counter covers (a VC with a user, a keyword, tags) has none, and its route answers a lower bound instead.
"""

from __future__ import annotations

from typing import Any

from pymongo.asynchronous.collection import AsyncCollection

from shared.db.lists.buckets import EVERYONE, bucket_counts, doc_id
from shared.db.tallies import Tallies

Doc = dict[str, Any]


async def list_total(jobs: AsyncCollection[Doc], counts: AsyncCollection[Doc], tallies: Tallies, *,
                     user: str | None, state: str | None, vc: str | None) -> int | None:
    """The exact number of jobs in the list, or None where no counter covers the filters (a VC and a user)."""
    if vc and user:
        return None
    uncounted: Doc = {"counted": False}
    for field, value in (("user", user), ("state", state), ("virtual_cluster", vc)):
        if value:
            uncounted[field] = value
    active = await jobs.count_documents(uncounted)
    if vc:
        ended = sum(n for s, n in (await tallies.by_vc()).get(vc, {}).items() if state in (None, s))
    else:
        top = await counts.find_one({"_id": doc_id(0, user or EVERYONE, 0)})
        ended = sum(bucket_counts(top, state).values())
    return ended + active
